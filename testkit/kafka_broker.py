"""Run a single-node Apache Kafka broker (KRaft, combined broker+controller).

The broker is a plain `java -cp <jars>/* kafka.Kafka server.properties`
subprocess working in a temp dir. Usage:

    with KafkaBroker() as broker:
        create_topic(broker.bootstrap, "t")

or from a shell: `python -m testkit.kafka_broker` (prints the bootstrap address
and runs until SIGINT/SIGTERM).

Class archive: `python -m testkit.kafka_broker --prepare-class-archive` (run by scripts/test.sh) records the
classes a broker loads into a class-data-sharing archive beside the Spark driver's (`workers.jvm_class_cache`: the
same fingerprint of JDK and jars, the same check before it is put in place); every later broker JVM, and the
storage format before it, maps it. Measured on 2 cores: a broker ready in 3.1-3.2 s at 2.2 CPU-s instead of 5.0-5.2
s at 4.1-4.3, and the suite starts a few dozen of them.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from confluent_kafka import KafkaException

from config.runtime import jvm_cache_dir
from testkit.jars import MissingJarsError, kafka_broker_jar_dir
from testkit.kafka_data import KafkaDataError, Record, admin_client, create_topic, delete_topic, produce
from testkit.ports import HOST, free_ports
from testkit.processes import ChildProcess, ChildServer, Startup, log_tails, serve_until_signalled
from testkit.tls import TlsFiles
from workers.jvm_class_cache import (
    archive_of,
    archive_problem,
    install,
    recording_option,
    remove_leftovers,
    sharing_option,
    temporary_path,
)

PropertyValue = str | int | float | bool

# Like kafka-server-start.sh's KAFKA_HEAP_OPTS / KAFKA_JVM_PERFORMANCE_OPTS,
# but small: tests may run several brokers at once.
DEFAULT_JVM_OPTS: tuple[str, ...] = (
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:-UsePerfData",
    "-Djava.awt.headless=true",
)

NODE_ID = 1
CLASS_ARCHIVE_PREFIX = "kafka-broker-"


def class_archive(jar_dir: Path, java: str) -> Path | None:
    """Where the broker JVM's class archive of this JDK and these jars lives (None: $MIRROR_V3_JVM_CACHE=off)."""
    cache = jvm_cache_dir(os.environ.get("MIRROR_V3_JVM_CACHE"))  # the Spark driver's rule and default
    if cache is None:
        return None
    return archive_of(Path(cache).expanduser(), Path(java).resolve(), jar_dir, CLASS_ARCHIVE_PREFIX)


def prepare_class_archive(jar_dir: Path | None = None) -> tuple[Path | None, bool]:
    """Record the broker's class archive unless it is there: a broker started and stopped (its JVM writes every
    class it loaded when it exits), the archive checked whole, then put in place read-only. Returns the archive and
    whether this call made it; BrokerError when the recording failed (the brokers then start as without one).
    Installed as the Spark driver's is (`workers.jvm_class_cache.install`): the archives of jars or JDKs that are
    gone are removed."""
    jar_dir = jar_dir or kafka_broker_jar_dir()
    java = java_executable()
    archive = class_archive(jar_dir, java)
    if archive is None or archive.is_file():
        return archive, False
    archive.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(archive.parent, CLASS_ARCHIVE_PREFIX)
    temporary = temporary_path(archive)
    try:
        recording = (*DEFAULT_JVM_OPTS, *recording_option(temporary).split())
        with KafkaBroker(jar_dir=jar_dir, jvm_opts=recording, class_sharing=False):
            pass  # started (ready for a real produce) and stopped: the JVM exits and writes the archive
        problem = archive_problem(str(Path(java).resolve().parent.parent), f"{jar_dir}/*", temporary)
        if problem is not None:
            raise BrokerError(f"the broker's class archive is unusable: {problem}")
        install(temporary, archive, Path(java).resolve(), jar_dir, CLASS_ARCHIVE_PREFIX)
    finally:
        temporary.unlink(missing_ok=True)
    return archive, True


class BrokerError(RuntimeError):
    """The broker could not be formatted or started, or died."""


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes as 22-char url-safe base64, no padding."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # Kafka's Uuid.randomUuid() avoids a leading '-' too: CLI parsers
        # would take such an id for an option.
        if not cluster_id.startswith("-"):
            return cluster_id


def broker_properties(
    *,
    port: int,
    controller_port: int,
    data_dir: Path,
    external_port: int | None = None,
    advertised_port: int | None = None,
) -> dict[str, str]:
    """server.properties for a fast single-node test broker (before extras)."""
    listeners = [f"PLAINTEXT://{HOST}:{port}", f"CONTROLLER://{HOST}:{controller_port}"]
    advertised = [f"PLAINTEXT://{HOST}:{port}"]
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if external_port is not None and advertised_port is not None:
        # Clients that bootstrap via EXTERNAL get metadata pointing at the
        # proxy port; PLAINTEXT stays direct for readiness checks and tests.
        listeners.append(f"EXTERNAL://{HOST}:{external_port}")
        advertised.append(f"EXTERNAL://{HOST}:{advertised_port}")
        protocols += ",EXTERNAL:PLAINTEXT"
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": protocols,
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # Single node: internal topics with RF 1, and few partitions so the
        # first consumer group / transaction does not wait for 50 of them.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        # Test data may carry old timestamps; never expire it by age or size.
        "log.retention.ms": "-1",
        "log.retention.bytes": "-1",
        # Fast background work: cleaner polls every 100 ms, retention checks
        # start at once and run often, deleted segments vanish quickly.
        "log.cleaner.backoff.ms": "100",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        "log.retention.check.interval.ms": "500",
        "log.initial.task.delay.ms": "0",
        "log.segment.delete.delay.ms": "100",
        # Trade-off: after kill() the restarted controller rejects the new
        # broker registration until the dead incarnation's session expires
        # (default 9 s, making start() after kill() take ~20 s); but a pause()
        # longer than the session fences the broker on resume (leaderless
        # partitions, new leader epoch). 6 s keeps pauses of ~5 s harmless.
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "500",
        # The controller appends a no-op record to the metadata log every 500 ms by default (KIP-835's liveness
        # signal), which its raft thread writes and the broker side applies: idle, the raft-io and quorum-controller
        # threads took 0.43 and 0.23 % of a core, 0.07 and 0.10 % at 5 s (measured, one broker); the suite keeps
        # several brokers up for its whole run. Nothing a test does waits on a no-op record.
        "metadata.max.idle.interval.ms": "5000",
        # Fewer threads: a test broker serves a handful of clients.
        "num.network.threads": "2",
        "num.io.threads": "4",
    }


def sasl_listener_properties(props: Mapping[str, str], port: int, users: Mapping[str, str]) -> dict[str, str]:
    """An extra SASL_PLAINTEXT listener (mechanism PLAIN) accepting `users` (name -> password)."""
    accounts = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": f"{props['listeners']},SASL_PLAINTEXT://{HOST}:{port}",
        "advertised.listeners": f"{props['advertised.listeners']},SASL_PLAINTEXT://{HOST}:{port}",
        "listener.security.protocol.map": f"{props['listener.security.protocol.map']},SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {accounts};"
        ),
    }


def oauthbearer_listener_properties(props: Mapping[str, str], port: int) -> dict[str, str]:
    """An extra SASL_PLAINTEXT listener named OAUTH (mechanism OAUTHBEARER) with Kafka's unsecured JWT validator:
    any token whose JWS is unsigned (`alg: none`) and has `sub`, `iat` and `exp` is accepted; its `sub` is the
    principal. Fine for tests, never for production."""
    return {
        "listeners": f"{props['listeners']},OAUTH://{HOST}:{port}",
        "advertised.listeners": f"{props['advertised.listeners']},OAUTH://{HOST}:{port}",
        "listener.security.protocol.map": f"{props['listener.security.protocol.map']},OAUTH:SASL_PLAINTEXT",
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        # The broker's side of the login; without a server callback handler the unsecured validator is used.
        "listener.name.oauth.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";'
        ),
    }


def ssl_listener_properties(props: Mapping[str, str], port: int, tls: TlsFiles) -> dict[str, str]:
    """An extra SSL listener with PEM key material that requires client certificates of the same CA."""
    return {
        "listeners": f"{props['listeners']},SSL://{HOST}:{port}",
        "advertised.listeners": f"{props['advertised.listeners']},SSL://{HOST}:{port}",
        "listener.security.protocol.map": f"{props['listener.security.protocol.map']},SSL:SSL",
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(tls.server),
        "listener.name.ssl.ssl.truststore.type": "PEM",
        "listener.name.ssl.ssl.truststore.location": str(tls.ca),
        "listener.name.ssl.ssl.client.auth": "required",
    }


def log4j_properties(log_file: Path) -> str:
    """reload4j config: everything to one file in the workdir, nothing to the console."""
    return "\n".join(
        [
            "log4j.rootLogger=INFO, file",
            "log4j.appender.file=org.apache.log4j.FileAppender",
            f"log4j.appender.file.File={_escape(str(log_file))}",
            "log4j.appender.file.Append=true",
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n",
            "log4j.logger.kafka.request.logger=WARN",
            "log4j.logger.org.apache.kafka.clients=WARN",
            "",
        ]
    )


class KafkaBroker(ChildServer):
    """A single-node KRaft Kafka broker running as a child process.

    Ports are chosen once, at construction, and kept across kill()/start()
    and restart(), so clients can reconnect to the same address.
    """

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        extra_properties: Mapping[str, PropertyValue] | None = None,
        advertised_port: int | None = None,
        sasl_users: Mapping[str, str] | None = None,
        oauthbearer: bool = False,
        tls: TlsFiles | None = None,
        jar_dir: Path | None = None,
        jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
        start_timeout: float = 60.0,
        class_sharing: bool = True,
    ) -> None:
        """Prepare (but do not start) a broker.

        workdir: kept after stop() if given; a temp dir (removed on stop) if not.
        extra_properties: added to / override server.properties.
        advertised_port: also open an EXTERNAL listener (port `external_port`)
            that advertises 127.0.0.1:<advertised_port>, e.g. a proxy in front
            of it that forwards to `external_port`. `bootstrap` stays direct.
        oauthbearer: also open a SASL_PLAINTEXT listener for OAUTHBEARER with unsecured JWTs (`oauth_bootstrap`).
        """
        self._jar_dir = jar_dir
        self._jvm_opts = tuple(jvm_opts)
        self._class_sharing = class_sharing  # map the class archive when there is one (`prepare_class_archive`)
        self._extra = dict(extra_properties or {})
        self._start_timeout = start_timeout
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="kafka-broker-"))
        self.advertised_port = advertised_port
        self.sasl_users = dict(sasl_users or {})
        self.tls = tls
        ports = free_ports(6)
        self.port, self.controller_port = ports[0], ports[1]
        self.external_port: int | None = ports[2] if advertised_port is not None else None
        self.sasl_port: int | None = ports[3] if self.sasl_users else None
        self.ssl_port: int | None = ports[4] if tls is not None else None
        self.oauth_port: int | None = ports[5] if oauthbearer else None
        self.cluster_id = random_cluster_id()
        self._child: ChildProcess | None = None
        self._paused = False
        self._closed = False

    # ---------------------------------------------------------------- addresses / paths

    @property
    def bootstrap(self) -> str:
        """Direct bootstrap address, "127.0.0.1:<port>"."""
        return f"{HOST}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str | None:
        """The SASL_PLAINTEXT (mechanism PLAIN) listener, when the broker was given sasl_users."""
        return None if self.sasl_port is None else f"{HOST}:{self.sasl_port}"

    @property
    def oauth_bootstrap(self) -> str | None:
        """The SASL_PLAINTEXT listener for OAUTHBEARER with unsecured JWTs, when the broker was given oauthbearer."""
        return None if self.oauth_port is None else f"{HOST}:{self.oauth_port}"

    @property
    def ssl_bootstrap(self) -> str | None:
        """The SSL listener (mutual TLS: clients need a certificate of the same CA), when given tls."""
        return None if self.ssl_port is None else f"{HOST}:{self.ssl_port}"

    @property
    def advertised_bootstrap(self) -> str | None:
        """Bootstrap through the proxy (the advertised EXTERNAL address), if any."""
        return None if self.advertised_port is None else f"{HOST}:{self.advertised_port}"

    @property
    def log_path(self) -> Path:
        """The broker's log4j log file."""
        return self.workdir / "logs" / "server.log"

    @property
    def stdout_path(self) -> Path:
        """The JVM's stdout+stderr (crashes, bad flags)."""
        return self.workdir / "logs" / "java.out"

    # ---------------------------------------------------------------------- lifecycle

    def start(self) -> KafkaBroker:
        """Format storage (if needed), launch the JVM and wait until it serves requests."""
        if self._closed:
            raise BrokerError("broker was stopped; create a new KafkaBroker")
        if self.is_running:
            raise BrokerError(f"broker already running at {self.bootstrap}")
        try:
            self._launch(started=time.monotonic())
        except BaseException:
            # The error carries the log tail; an owned temp dir must not leak
            # (a failing `with KafkaBroker()` never reaches __exit__).
            self._terminate(graceful=False)
            if self._owns_workdir:
                self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Shut down (SIGTERM, SIGKILL after `timeout`) and remove an owned temp workdir."""
        if self._closed:
            return
        self._terminate(graceful=True, timeout=timeout)
        self._closed = True
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (a crash); data stays, start() brings it back. A single broker killed so may come back
        without the last records it had acknowledged (and served): seen after a kill during a steady produce."""
        self._terminate(graceful=False)

    def shut_down(self, timeout: float = 20.0) -> None:
        """Stop the broker gracefully (SIGTERM: a controlled shutdown, its log flushed); start() brings it back."""
        self._terminate(graceful=True, timeout=timeout)

    def restart(self, *, hard: bool = False, timeout: float = 20.0) -> None:
        """Stop (gracefully, or SIGKILL if hard) and start again on the same ports and data."""
        self._terminate(graceful=not hard, timeout=timeout)
        self.start()

    def pause(self) -> None:
        """Freeze the JVM (SIGSTOP): connections stay open but nothing answers."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo pause() (SIGCONT)."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def log_tail(self, lines: int = 40) -> str:
        """Last lines of the broker log and of the JVM output, for error messages."""
        return log_tails((self.log_path, self.stdout_path), lines)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"KafkaBroker({self.bootstrap}, {state}, workdir={str(self.workdir)!r})"

    # ---------------------------------------------------------------------- internals

    def _launch(self, started: float) -> None:
        jar_dir = self._jar_dir or kafka_broker_jar_dir()
        java = java_executable()
        server_props, log4j_props = self._write_config()
        archive = class_archive(jar_dir, java) if self._class_sharing else None
        sharing = sharing_option(archive)
        base_cmd = [
            java,
            *self._jvm_opts,
            *([sharing] if sharing else []),
            f"-Dlog4j.configuration=file:{log4j_props}",
            f"-Dkafka.logs.dir={self.log_path.parent}",
            "-cp",
            f"{jar_dir}/*",
        ]
        self._format(base_cmd, server_props)
        self._child = ChildProcess(
            [*base_cmd, "kafka.Kafka", str(server_props)], cwd=self.workdir, log_path=self.stdout_path
        )
        self._paused = False
        startup = Startup(
            self._child,
            name="Kafka broker",
            address=self.bootstrap,
            started=started,
            timeout=self._start_timeout,
            error=BrokerError,
            log_tail=self.log_tail,
        )
        self._wait_ready(startup)

    def _write_config(self) -> tuple[Path, Path]:
        data_dir = self.workdir / "data"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        props = broker_properties(
            port=self.port,
            controller_port=self.controller_port,
            data_dir=data_dir,
            external_port=self.external_port,
            advertised_port=self.advertised_port,
        )
        if self.sasl_port is not None:
            props.update(sasl_listener_properties(props, self.sasl_port, self.sasl_users))
        if self.oauth_port is not None:
            props.update(oauthbearer_listener_properties(props, self.oauth_port))
        if self.ssl_port is not None and self.tls is not None:
            props.update(ssl_listener_properties(props, self.ssl_port, self.tls))
        props.update({k: _prop_str(v) for k, v in self._extra.items()})
        server_props = self.workdir / "server.properties"
        server_props.write_text("".join(f"{k}={_escape(v)}\n" for k, v in props.items()))
        log4j_props = self.workdir / "log4j.properties"
        log4j_props.write_text(log4j_properties(self.log_path))
        return server_props, log4j_props

    def _format(self, base_cmd: list[str], server_props: Path) -> None:
        # --ignore-formatted makes this a no-op when restarting on existing data.
        cmd = [*base_cmd, "kafka.tools.StorageTool", "format", "-t", self.cluster_id]
        cmd += ["-c", str(server_props), "--ignore-formatted"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.workdir)
        except subprocess.TimeoutExpired:
            raise BrokerError("formatting Kafka storage took over 120 s") from None
        if done.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")

    def _wait_ready(self, startup: Startup) -> None:
        # First the TCP port (so librdkafka does not log connection refusals),
        # then a metadata request, then a real topic create/describe/delete,
        # which needs the controller and the broker's metadata to be live.
        startup.wait_for_port(self.port, "listener never opened")
        admin = admin_client(self.bootstrap)
        probe = f"__testkit_ready_{uuid.uuid4().hex[:8]}"
        last_error = ""
        while True:
            remaining = startup.remaining(last_error)
            try:
                admin.list_topics(timeout=min(5.0, remaining))
                create_topic(self.bootstrap, probe, timeout=remaining)
                # An idempotent produce warms up producer-id allocation, which
                # otherwise costs the first idempotent/transactional client ~1 s.
                idempotent = {"enable.idempotence": True, "max.in.flight.requests.per.connection": 5}
                produce(self.bootstrap, probe, 0, [Record(None, b"ready")], config=idempotent, timeout=remaining)
                delete_topic(self.bootstrap, probe, timeout=max(remaining, 10.0))
                return
            except (KafkaException, KafkaDataError, TimeoutError) as exc:
                last_error = str(exc)
                time.sleep(0.1)

    def _terminate(self, *, graceful: bool, timeout: float = 20.0) -> None:
        child = self._child
        if child is not None:
            if self._paused and child.is_running:
                child.send_signal(signal.SIGCONT)  # a stopped JVM cannot handle SIGTERM
            child.stop(graceful=graceful, timeout=timeout)
        self._child = None
        self._paused = False

    def _signal(self, sig: signal.Signals) -> None:
        if not self.is_running:
            raise BrokerError("broker is not running")
        assert self._child is not None
        self._child.send_signal(sig)


# ---------------------------------------------------------------------------- helpers


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("java not found: install Java 17+ or set JAVA_HOME")
    return java


def _prop_str(value: PropertyValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _escape(value: str) -> str:
    # java.util.Properties treats backslash as an escape character.
    return value.replace("\\", "\\\\")


# ------------------------------------------------------------------------------ CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.kafka_broker",
        description="Run a throwaway single-node Kafka broker; print its bootstrap address.",
    )
    parser.add_argument("--workdir", type=Path, help="keep data here (default: temp dir, removed)")
    parser.add_argument("--advertised-port", type=int, help="extra EXTERNAL listener advertising this port")
    parser.add_argument(
        "-p", "--property", action="append", default=[], metavar="KEY=VALUE", help="extra server property"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="startup timeout in seconds")
    parser.add_argument(
        "--prepare-class-archive",
        action="store_true",
        help="record the broker JVM's class archive unless it is there, then exit (scripts/test.sh)",
    )
    args = parser.parse_args(argv)
    if args.prepare_class_archive:
        try:
            archive, made = prepare_class_archive()
        except (MissingJarsError, BrokerError) as exc:
            print(f"broker class archive: not made ({exc}); brokers start without one", file=sys.stderr)
            return 0
        print(f"broker class archive: {archive} {'recorded' if made else 'present'}")
        return 0

    extra: dict[str, PropertyValue] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--property needs KEY=VALUE, got {item!r}")
        extra[key] = value

    broker = KafkaBroker(
        args.workdir, extra_properties=extra, advertised_port=args.advertised_port, start_timeout=args.timeout
    )
    started = time.monotonic()

    def ready() -> None:
        print(broker.bootstrap, flush=True)
        info = f"kafka broker ready in {time.monotonic() - started:.1f}s; log: {broker.log_path}"
        if broker.external_port is not None:
            info += f"; EXTERNAL listener on :{broker.external_port} advertises {broker.advertised_bootstrap}"
        print(info + "; Ctrl-C to stop", file=sys.stderr, flush=True)

    return serve_until_signalled(
        broker,
        ready=ready,
        died=lambda: f"Kafka broker died\n{broker.log_tail()}",
        errors=(MissingJarsError, BrokerError),
    )


if __name__ == "__main__":
    sys.exit(main())
