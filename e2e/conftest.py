"""Real services for the end-to-end suite: an Apache Kafka broker (KRaft) and an S3 server per
session, and the destinations every exactly-once test runs against."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.destinations import DestinationUnderTest, FilesystemDestinationUnderTest, S3DestinationUnderTest
from testkit.kafka_broker import KafkaBroker
from testkit.ports import free_port
from testkit.s3_servers import MotoServer
from testkit.tcp_proxy import TcpProxy
from testkit.tls import TlsFiles, make_tls_files

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    broker = KafkaBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


SASL_USER, SASL_PASSWORD = "mirror", "mirror-secret-password"


@pytest.fixture(scope="session")
def destination_tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A CA with a server certificate for 127.0.0.1 and a client certificate (PEM)."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def kafka_destination_broker(destination_tls: TlsFiles) -> Iterator[KafkaBroker]:
    """A second, independent cluster: the destination of Kafka -> Kafka mirrors.

    Besides its direct `bootstrap` it has a SASL_PLAINTEXT listener (mechanism PLAIN, user SASL_USER)
    and an SSL listener requiring client certificates (`destination_tls`) for the security pass-through tests,
    and an EXTERNAL listener advertised behind a TCP proxy
    (`kafka_destination_proxy`, bootstrap `advertised_bootstrap`) for outage tests.
    """
    proxy_port = free_port()
    broker = KafkaBroker(sasl_users={SASL_USER: SASL_PASSWORD}, tls=destination_tls, advertised_port=proxy_port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


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
    server = MotoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["filesystem", "s3"])
def destination(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> DestinationUnderTest:
    """Each exactly-once test runs once per destination type."""
    if request.param == "filesystem":
        return FilesystemDestinationUnderTest(tmp_path / "archive")
    server: MotoServer = request.getfixturevalue("moto")
    s3 = S3DestinationUnderTest(server.endpoint, server.access_key, server.secret_key, server.region)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)  # the CLI subprocesses inherit the credentials
    return s3


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test, readable in broker logs."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return f"{base}-{next(_names)}"
