"""Child processes for test servers (Kafka broker, S3 servers), and what they share.

    child = ChildProcess(cmd, cwd=workdir, log_path=workdir / "server.out")
    startup = Startup(child, name="moto server", address=endpoint, started=t0,
                      timeout=30.0, error=S3ServerError, log_tail=server.log_tail)
    startup.wait_for_port(port, "port never opened")
    ...
    child.stop(graceful=True, timeout=10.0)

A ChildProcess runs in its own session and dies with this Python process
(Linux), its stdout+stderr appended to a log file. `StartStop` makes any
start()/stop() object a context manager (also used by the in-process FaultProxy).
`serve_until_signalled()` is the main loop of a CLI that runs one server
until SIGINT/SIGTERM.
"""

from __future__ import annotations

import abc
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import NoReturn, Self

from testkit.ports import HOST

# Linux: the child gets SIGKILL when the thread that forked it exits, so a
# killed test run leaves no orphan servers. Forking from one long-lived thread
# ties that to the life of this Python process instead of to the caller's thread.
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="testkit-spawner")


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    def hook() -> None:
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # parent already gone before prctl
            os._exit(1)

    return hook


class ChildProcess:
    """A server's process: spawned at construction, output appended to `log_path`."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        cwd: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Spawn `cmd` in `cwd`; `env` is added to (not instead of) this process's environment."""
        full_env = {**os.environ, **env} if env else None
        self._out = log_path.open("ab")

        def popen() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=full_env,
                start_new_session=True,  # Ctrl-C hits Python only; we shut the server down
                preexec_fn=_die_with_parent(os.getpid()),
            )

        try:
            self._proc = _spawner.submit(popen).result()
        except BaseException:
            self._out.close()
            raise

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while the process runs."""
        return self._proc.poll()

    @property
    def is_running(self) -> bool:
        return self._proc.poll() is None

    def send_signal(self, sig: signal.Signals) -> None:
        self._proc.send_signal(sig)

    def stop(self, *, graceful: bool, timeout: float) -> None:
        """End the process (SIGTERM, SIGKILL after `timeout`; or SIGKILL at once) and close its log."""
        proc = self._proc
        if proc.poll() is None:
            if graceful:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            proc.wait()
        self._out.close()


class Startup:
    """The wait for a just-spawned server: fails fast, with its log tail, if it dies or runs out of time."""

    def __init__(
        self,
        child: ChildProcess,
        *,
        name: str,
        address: str,
        started: float,
        timeout: float,
        error: Callable[[str], Exception],
        log_tail: Callable[[], str],
    ) -> None:
        """name, address: for messages ("Kafka broker", "127.0.0.1:9092").
        started: time.monotonic() when start() began; the deadline is `timeout` later.
        error: the exception type (or factory) to raise.
        """
        self._child = child
        self._name = name
        self._address = address
        self._timeout = timeout
        self._deadline = started + timeout
        self._error = error
        self._log_tail = log_tail

    def remaining(self, detail: str = "") -> float:
        """Seconds left before the deadline; raises if the process exited or none are left.

        detail: why it is not ready yet (e.g. the last probe's error), for the timeout message.
        """
        code = self._child.returncode
        if code is not None:
            raise self._error(f"{self._name} exited with code {code} during startup\n{self._log_tail()}")
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._timed_out(detail)
        return left

    def wait_for_port(self, port: int, detail: str) -> None:
        """Wait until `port` on 127.0.0.1 accepts connections (detail: the timeout message's reason)."""
        while not port_open(port):
            self.remaining(detail)
            time.sleep(0.05)

    def _timed_out(self, detail: str) -> NoReturn:
        raise self._error(
            f"{self._name} at {self._address} not ready within {self._timeout:.0f}s"
            f"{': ' + detail if detail else ''}\n{self._log_tail()}"
        )


class StartStop(abc.ABC):
    """start()/stop() as a context manager: `with x:` starts x unless it runs, stops it at the end."""

    @property
    @abc.abstractmethod
    def is_running(self) -> bool: ...

    @abc.abstractmethod
    def start(self) -> object: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        if not self.is_running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ChildServer(StartStop):
    """A StartStop whose server is one ChildProcess (`_child`, None while stopped): its pid and whether it runs."""

    _child: ChildProcess | None = None

    @property
    def pid(self) -> int | None:
        return None if self._child is None else self._child.pid

    @property
    def is_running(self) -> bool:
        return self._child is not None and self._child.is_running

    def stop_child(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; nothing when it is not running."""
        if self._child is not None:
            self._child.stop(graceful=True, timeout=timeout)
            self._child = None


def port_open(port: int, host: str = HOST) -> bool:
    """Does host:port accept a TCP connection (within 0.5 s)?"""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file (from its last 64 KiB); "" if it cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def log_tails(paths: Iterable[Path], lines: int) -> str:
    """The tails of several logs, each under a `--- path ---` line, for error messages."""
    parts = []
    for path in paths:
        text = tail(path, lines)
        if text:
            parts.append(f"--- {path} ---\n{text}")
    return "\n".join(parts) or "(no log output)"


def serve_until_signalled(
    server: StartStop,
    *,
    ready: Callable[[], None],
    died: Callable[[], str],
    errors: tuple[type[Exception], ...],
) -> int:
    """A CLI's main loop: start `server`, call `ready()` (print its address), serve until SIGINT/SIGTERM.

    Returns the exit code: 0 once signalled; 1 if the server dies first (`died()`
    is printed as the error) or if start()/ready() raise one of `errors`. The
    server is stopped in every case.
    """
    # The signals only set a flag: the server is stopped by the finally below,
    # not torn down half-way by KeyboardInterrupt.
    stop_requested = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_requested.set())
    try:
        server.start()
        ready()
        while not stop_requested.wait(0.5):
            if not server.is_running:
                print(f"error: {died()}", file=sys.stderr)
                return 1
        return 0
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        server.stop()
