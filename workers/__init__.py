"""What runs inside Spark: one job shape for every job (items packed into tasks, typed outcomes), the flush
writes, and the restore and verify jobs."""
