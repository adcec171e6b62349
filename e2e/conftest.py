"""Real services for the end-to-end suite, one of each per session: a source Kafka broker (KRaft), a destination
broker with SASL, TLS and proxied listeners, and a moto S3 server; plus a fresh target per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kafka_broker import KafkaBroker
from testkit.ports import free_port
from testkit.s3_servers import MotoServer
from testkit.schema_registry import SchemaRegistry
from testkit.targets import FilesystemTarget, S3Target
from testkit.tcp_proxy import TcpProxy
from testkit.tls import TlsFiles, make_tls_files

_names = itertools.count()
SASL_USER, SASL_PASSWORD = "mirror", "mirror-secret-password"

# The tests that take a minute or more (CI's --durations list), started first: with two workers stealing work,
# a long test picked up last keeps one worker busy while the other has nothing left (measured: the last two
# minutes of a CI run were one round trip running alone).
LONGEST_FIRST = (
    "e2e/test_spark_cluster.py::",
    "e2e/test_disaster_recovery.py::",
    "e2e/test_s3.py::test_a_restart_on_a_long_chain",
    "e2e/test_restore.py::test_an_archive_round_trips",
    "e2e/test_restore.py::test_kill_9",
    "e2e/test_operations.py::test_a_cluster_down_at_start",
    "e2e/test_secrets.py::",
    "e2e/test_kafka_destination.py::test_security_settings",
    "e2e/test_restore.py::test_a_dry_run",
    "e2e/test_filesystem.py::test_round_trip",
    "e2e/test_restore.py::test_from_s3",
    "e2e/test_filesystem.py::test_kill_9",
    "e2e/test_kafka_destination.py::test_kill_9",
    "e2e/test_schemas.py::",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if item.nodeid.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def destination_tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A CA with a server certificate for 127.0.0.1 and a client certificate (PEM)."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def kafka_destination_broker(destination_tls: TlsFiles) -> Iterator[KafkaBroker]:
    """A second, independent cluster: the destination of Kafka -> Kafka mirrors.

    Besides its direct `bootstrap` it has a SASL_PLAINTEXT listener (mechanism PLAIN, user SASL_USER), one for
    OAUTHBEARER with unsigned JWTs (`oauth_bootstrap`), an SSL listener requiring client certificates
    (`destination_tls`), and an EXTERNAL listener advertised behind a TCP proxy (`kafka_destination_proxy`,
    bootstrap `advertised_bootstrap`) for outage tests.
    """
    broker = KafkaBroker(
        sasl_users={SASL_USER: SASL_PASSWORD}, oauthbearer=True, tls=destination_tls, advertised_port=free_port()
    )
    with broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_destination_proxy(kafka_destination_broker: KafkaBroker) -> Iterator[TcpProxy]:
    broker = kafka_destination_broker
    assert broker.external_port is not None and broker.advertised_port is not None
    with TcpProxy(broker.external_port, port=broker.advertised_port) as proxy:
        yield proxy


@pytest.fixture
def healthy_destination_proxy(kafka_destination_proxy: TcpProxy) -> Iterator[TcpProxy]:
    """The destination proxy, guaranteed to let connections through again after the test."""
    kafka_destination_proxy.refuse(False)
    try:
        yield kafka_destination_proxy
    finally:
        kafka_destination_proxy.refuse(False)


@pytest.fixture(scope="session")
def moto() -> Iterator[MotoServer]:
    with MotoServer() as server:
        yield server


@pytest.fixture
def fs(tmp_path: Path) -> FilesystemTarget:
    return FilesystemTarget(tmp_path / "archive")


@pytest.fixture
def s3(moto: MotoServer) -> S3Target:
    """A fresh bucket on the session's moto server."""
    return S3Target(moto.endpoint, moto.access_key, moto.secret_key, moto.region)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test, readable in broker logs."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return f"{base}-{next(_names)}"


@pytest.fixture(scope="session")
def source_registry() -> Iterator[SchemaRegistry]:
    """A schema registry beside the source broker (Apicurio, Confluent API, empty at start)."""
    with SchemaRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def destination_registry() -> Iterator[SchemaRegistry]:
    """An independent registry beside the destination cluster: its own schemas and IDs."""
    with SchemaRegistry() as registry:
        yield registry
