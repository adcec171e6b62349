"""SIGINT/SIGTERM that arrive before the supervisor handles signals itself.

`python -m supervisor run` spends a second or two importing and starting before its event loop
watches for signals; an orchestrator that stops the pod at once must still get a drain and exit 0,
not a process killed by the default action. `install()` runs first thing in both entry points
(`supervisor/__main__.py`, `commands/console.py`); `run`'s supervisor replays what was `received`. Other
commands restore the default action (`release`).
"""

from __future__ import annotations

import os
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM)
received: list[int] = []


def _remember(signum: int, _frame: object) -> None:
    received.append(signum)


def install() -> None:
    for signum in SIGNALS:
        signal.signal(signum, _remember)


def release() -> None:
    """Back to the default actions; a signal that already came is delivered again now."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    for pending in received:
        os.kill(os.getpid(), pending)
