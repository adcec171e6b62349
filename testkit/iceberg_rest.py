"""A real Iceberg REST catalog server for the tests: Iceberg's own REST server half (the adapter and servlet that
Iceberg's REST fixture image runs, from Maven Central) over Iceberg's JDBC catalog on a SQLite file, in a child JVM
on a free port of 127.0.0.1 (testkit/IcebergRestServer.java). Table metadata goes to `warehouse`.

    with IcebergRestCatalog(warehouse=tmp_path / "warehouse") as rest:
        catalog = load_catalog("rest", type="rest", uri=rest.uri)

Started in about 5 s (the launcher is compiled at start), ~150 MB of memory with the heap capped at 256 MB. Stopped
by process id: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from testkit.kafka_broker import java_executable
from testkit.maven_jars import JarSet, MavenJarsError
from testkit.ports import HOST, free_port
from testkit.processes import ChildProcess, ChildServer, Startup, log_tails, serve_until_signalled

ICEBERG_VERSION = "1.10.0"
LAUNCHER = Path(__file__).resolve().parent / "IcebergRestServer.java"
REST_SERVER_JARS = JarSet(
    name=f"iceberg-rest-{ICEBERG_VERSION}",
    artifacts=(
        f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}",
        f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}:tests",  # RESTCatalogAdapter, RESTCatalogServlet
        "org.eclipse.jetty:jetty-servlet:11.0.25",  # the servlet container Iceberg's REST fixture uses
        "org.xerial:sqlite-jdbc:3.50.3.0",
        "org.apache.hadoop:hadoop-client-api:3.4.1",  # the JDBC catalog's default FileIO is Hadoop's
        "org.apache.hadoop:hadoop-client-runtime:3.4.1",
        "org.slf4j:slf4j-simple:2.0.17",
    ),
    marker=f"iceberg-core-{ICEBERG_VERSION}-tests.jar",
)


class IcebergRestError(RuntimeError):
    """The REST catalog could not be started, or died."""


class IcebergRestCatalog(ChildServer):
    def __init__(self, *, warehouse: Path, start_timeout: float = 90.0, heap_mb: int = 256) -> None:
        self.port = free_port()
        self.warehouse = warehouse
        self.workdir = Path(tempfile.mkdtemp(prefix="iceberg-rest-"))
        self._start_timeout = start_timeout
        self._heap_mb = heap_mb
        self._child: ChildProcess | None = None

    @property
    def uri(self) -> str:
        """What PyIceberg's `uri` and Spark's `spark.sql.catalog.<name>.uri` take."""
        return f"http://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "rest.out"

    def start(self) -> IcebergRestCatalog:
        started = time.monotonic()
        jars = REST_SERVER_JARS.jars()
        self.warehouse.mkdir(parents=True, exist_ok=True)
        command = [
            java_executable(),
            f"-Xmx{self._heap_mb}m",
            "-cp",
            ":".join(str(jar) for jar in jars),
            str(LAUNCHER),
            HOST,
            str(self.port),
            f"jdbc:sqlite:{self.workdir / 'catalog.db'}",
            self.warehouse.resolve().as_uri(),
        ]
        self._child = ChildProcess(command, cwd=self.workdir, log_path=self.log_path)
        startup = Startup(
            self._child,
            name="iceberg rest catalog",
            address=self.uri,
            started=started,
            timeout=self._start_timeout,
            error=IcebergRestError,
            log_tail=lambda: log_tails((self.log_path,), 40),
        )
        try:
            startup.wait_for_port(self.port, "port never opened")
            while not self._answers():
                startup.remaining("GET /v1/config does not answer yet")
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
            with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def __repr__(self) -> str:
        return f"IcebergRestCatalog({self.uri}, {'running' if self.is_running else 'stopped'})"


def main() -> int:
    """`python -m testkit.iceberg_rest [WAREHOUSE]`: a throwaway REST catalog until Ctrl-C; prints its URI."""
    warehouse = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="iceberg-warehouse-"))
    rest = IcebergRestCatalog(warehouse=warehouse)

    def ready() -> None:
        print(rest.uri, flush=True)

    def died() -> str:
        return f"the iceberg rest catalog exited\n{log_tails((rest.log_path,), 20)}"

    return serve_until_signalled(rest, ready=ready, died=died, errors=(IcebergRestError, MavenJarsError))


if __name__ == "__main__":
    sys.exit(main())
