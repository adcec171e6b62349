"""Benchmarks of mirror-v3 against a local broker.

    python -m bench                      # backlog throughput: raw confluent-kafka consume vs mirror-v3 -> Parquet
    python -m bench --quick              # smoke size
    python -m bench.profile_reads        # where a Spark range read spends its time (development aid)

Modules:
    backlog       -- the `python -m bench` entry: broker, data, both measurements, report
    data          -- produce N fixed-size records to a partition, fast
    raw           -- the raw baseline: a tight confluent-kafka consume loop
    mirror_run    -- the real CLI as a subprocess, timed from `mirror starting` to the last offset landing
    machine       -- what the numbers were measured on
    report        -- the console table and docs/benchmarks.md
    profile_reads -- time Spark range reads and Parquet encoding in-process
"""
