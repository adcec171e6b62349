"""The Spark data plane, both halves. The driver's: the process's one session (`spark_session.py`, started and
announced by `spark_start.py`), the partition adapter that turns an actor's decisions into Spark jobs over exact
ranges (`partition_source.py`), the pure flush planner (`flush_planner.py`) and the flush scheduler that runs the
small flushes of many partitions as one job (`flush_scheduler.py`). What runs inside Spark: one job shape for every
job (`range_job.py`: items packed into tasks, typed outcomes), the flush writes, and the restore and verify jobs."""
