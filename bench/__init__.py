"""Benchmarks of mirror-v3 against a local broker.

    python -m bench                      # backlog throughput: raw confluent-kafka consume vs mirror-v3 -> Parquet
                                         # files and -> Parquet objects on a local moto S3 server
    python -m bench --paths s3           # only some destinations (filesystem, s3)
    python -m bench --quick              # smoke size
    python -m bench.profile_reads        # where a Spark range read spends its time (development aid)

Modules:
    backlog       -- the `python -m bench` entry: broker, data, the raw and one mirror measurement per path, report
    data          -- produce N fixed-size records to a partition, fast
    raw           -- the raw baseline: a tight confluent-kafka consume loop
    mirror_run    -- the real CLI as a subprocess, timed from `mirror starting` to the last offset landing
    targets       -- the destinations (a directory; a bucket on moto): config block, done-detection, read-back
    machine       -- what the numbers were measured on
    report        -- the console table and docs/benchmarks.md
    profile_reads -- time Spark range reads and Parquet encoding in-process
"""
