"""Benchmarks of mirror-v3: `python -m bench` (see bench.__main__ for the options).

scenarios   -- the table of end-to-end scenarios, full and --quick
runner      -- runs the micro benchmarks and the table, one JSON line per measurement
throughput, latency, restart, idle, restore -- one kind of scenario each
mirror      -- one mirror process of a scenario (testkit's MirrorRun on a testkit target), drained and verified
raw         -- backlogs and the raw Kafka baselines
procs       -- CPU and memory of processes (psutil)
profilers   -- py-spy and JFR, behind --profile
report      -- the results rendered as docs/benchmarks.md and its chart
micro/      -- pytest-benchmark tests of the hot pure functions
"""
