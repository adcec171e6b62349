"""Benchmarks of mirror-v3: `python -m bench` (see bench.__main__ for the options).

scenarios   -- the table of end-to-end scenarios, full and --quick
runner      -- runs the micro benchmarks and the table, one JSON line per measurement
throughput, latency, restart, idle, restore, estate -- one kind of scenario each (estate: `estate-steady`)
steady      -- a steady producer over many partitions, each value stamped with its produce time
durable     -- when each record became durable at a destination, read around the system that wrote it
streaming, streaming_job -- estate-steady's reference: Spark Structured Streaming as its own process
mirror      -- one mirror process of a scenario (testkit's MirrorRun on a testkit target), drained and verified
raw         -- backlogs and the raw Kafka baselines
procs       -- CPU and memory of processes (psutil)
profilers   -- py-spy and JFR, behind --profile
report      -- the results rendered as docs/benchmarks.md and its chart (report_estate: estate-steady's section)
micro/      -- pytest-benchmark tests of the hot pure functions
"""
