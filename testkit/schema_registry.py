"""A real schema registry for the tests: Apicurio Registry (built from Maven Central by scripts/build-registry.sh)
in a child process on a free port of 127.0.0.1, its storage in memory, serving the Confluent REST API at `url`
(`/apis/ccompat/v7`). Each instance starts empty and is independent of every other (a source and a destination).

    with SchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})

Started in about 5 s (Quarkus), ~220 MB of memory with the heap capped at 256 MB. Stopped by process id:
SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from testkit.jars import MissingJarsError, schema_registry_jar
from testkit.kafka_broker import java_executable
from testkit.ports import HOST, free_port
from testkit.processes import ChildProcess, ChildServer, Startup, log_tails, serve_until_signalled

CONFLUENT_API = "/apis/ccompat/v7"


class SchemaRegistryError(RuntimeError):
    """The registry could not be started, or died."""


class SchemaRegistry(ChildServer):
    def __init__(self, *, start_timeout: float = 90.0, heap_mb: int = 256) -> None:
        self.port = free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="schema-registry-"))
        self._start_timeout = start_timeout
        self._heap_mb = heap_mb
        self._child: ChildProcess | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (what `schema.registry.url` / SchemaRegistryClient take)."""
        return f"http://{HOST}:{self.port}{CONFLUENT_API}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.out"

    def start(self) -> SchemaRegistry:
        started = time.monotonic()
        command = [
            java_executable(),
            f"-Xmx{self._heap_mb}m",
            f"-Dquarkus.http.host={HOST}",
            f"-Dquarkus.http.port={self.port}",
            "-jar",
            str(schema_registry_jar()),
        ]
        # The registry's own defaults: H2 in memory (nothing on disk), no authentication, no telemetry endpoint.
        self._child = ChildProcess(command, cwd=self.workdir, log_path=self.log_path)
        startup = Startup(
            self._child,
            name="schema registry",
            address=self.url,
            started=started,
            timeout=self._start_timeout,
            error=SchemaRegistryError,
            log_tail=lambda: log_tails((self.log_path,), 40),
        )
        try:
            startup.wait_for_port(self.port, "port never opened")
            while not self._answers():
                startup.remaining("the Confluent API does not answer yet")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.stop_child()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return isinstance(json.loads(response.read()), list)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.url}, {'running' if self.is_running else 'stopped'})"


def main() -> int:
    """`python -m testkit.schema_registry`: a throwaway registry until Ctrl-C; prints its Confluent API URL."""
    registry = SchemaRegistry()

    def ready() -> None:
        print(registry.url, flush=True)

    def died() -> str:
        return f"the schema registry exited\n{log_tails((registry.log_path,), 20)}"

    return serve_until_signalled(registry, ready=ready, died=died, errors=(SchemaRegistryError, MissingJarsError))


if __name__ == "__main__":
    sys.exit(main())
