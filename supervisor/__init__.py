"""The run process, what `python -m supervisor run` (and `mirror-v3 run`) keeps running: the `Supervisor`
(`app.py`: the estate and its discovery, the leases, signals, readiness, failure collapse), one actor per mirror
(`actor.py`: when to flush, commits in chain order, the drain), what a failed mirror may do and how each fares
(`failures.py`, `mirror_record.py`, `transaction_hold.py`), and the process services beside the mirrors (topic
management, group sync, the topic and group archivers, the schema registries' watch, the source-offset committer,
the cluster ids). What the one-shot commands share with it lives below it (`core/`, `source/`, `telemetry/`, and
the driver half of the Spark data plane in `workers/`): `commands/` imports only `supervisor.app.Supervisor`, and
`supervisor/__main__.py` is the documented entry into the CLI."""
