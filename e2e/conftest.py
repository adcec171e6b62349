"""Real services for the end-to-end suite: one Apache Kafka broker (KRaft) per session."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from testkit.kafka_broker import KafkaBroker

_names = itertools.count()


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaBroker]:
    broker = KafkaBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test, readable in broker logs."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:60]
    return f"{base}-{next(_names)}"
