"""Real services for the end-to-end suite: an Apache Kafka broker (KRaft) and an S3 server per
session, and the destinations every exactly-once test runs against."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.destinations import DestinationUnderTest, FilesystemDestinationUnderTest, S3DestinationUnderTest
from testkit.kafka_broker import KafkaBroker
from testkit.s3_servers import MotoServer

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
def kafka_destination_broker() -> Iterator[KafkaBroker]:
    """A second, independent cluster: the destination of Kafka -> Kafka mirrors. It also has a
    SASL_PLAINTEXT listener (mechanism PLAIN, user SASL_USER) for the security pass-through tests."""
    broker = KafkaBroker(sasl_users={SASL_USER: SASL_PASSWORD})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


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
