from core import early_signals

early_signals.install()  # before the imports below: they take long enough for a SIGTERM to arrive

from commands.cli import main  # noqa: E402

raise SystemExit(main())
