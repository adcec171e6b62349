"""The `mirror-v3` command (installed with the package): the same CLI as `python -m supervisor`."""

from __future__ import annotations


def main() -> int:
    from core import early_signals

    early_signals.install()  # before the imports below: they take long enough for a SIGTERM to arrive
    from commands.cli import main as cli_main

    return cli_main()
