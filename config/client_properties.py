"""The pass-through map of librdkafka properties (`client-properties` of a source cluster and of the Kafka
destination): which keys mirror-v3 owns and refuses, and the checks librdkafka itself makes of names and values,
run at load so a typo is a config error (exit 2) and not a Spark task failing later.

Only librdkafka clients take the map (the Spark tasks' consumers and producers, the admin clients); the driver's
aiokafka clients (offset queries, the renumber fence) have no equivalent for most keys and take none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

ClientPropertyValue = str | int | bool
# The client library's own check of names and values, (key, problem) for the first it refuses. config/ makes no
# client, so whoever loads a config file passes librdkafka's (kafka_clients.property_check).
LibraryCheck = Callable[[Mapping[str, str], str], tuple[str, str] | None]

_SOURCE_READ = "set by mirror-v3: ranges are read exactly, from offsets the destination decides"
_PRODUCE = "set by mirror-v3: the exactly-once producer depends on it"
_GROUPS = "set by mirror-v3: it assigns partitions itself and never commits to a source group"

# Keys whose value mirror-v3 decides, and why (or which config key sets it instead).
OWNED_PROPERTIES: dict[str, str] = {
    "bootstrap.servers": "set bootstrap-servers instead",
    "metadata.broker.list": "set bootstrap-servers instead",
    "security.protocol": "set security.protocol instead",
    "isolation.level": "set by mirror-v3: the destination is read committed",
    "group.id": "set by mirror-v3: renumber keeps its position in group <transaction-id-prefix>.<dest-name>",
    "group.instance.id": _GROUPS,
    "group.protocol": _GROUPS,
    "group.remote.assignor": _GROUPS,
    "partition.assignment.strategy": _GROUPS,
    "enable.auto.commit": _GROUPS,
    "auto.commit.interval.ms": _GROUPS,
    "enable.auto.offset.store": _SOURCE_READ,
    "auto.offset.reset": _SOURCE_READ,
    "enable.partition.eof": _SOURCE_READ,
    "enable.idempotence": _PRODUCE,
    "enable.gapless.guarantee": _PRODUCE,
    "transactional.id": "set transaction-id-prefix instead",
    "transaction.timeout.ms": _PRODUCE,
    "acks": _PRODUCE,
    "request.required.acks": _PRODUCE,
    "max.in.flight.requests.per.connection": _PRODUCE,
    "max.in.flight": _PRODUCE,
    "retries": _PRODUCE,
    "message.send.max.retries": _PRODUCE,
    "message.timeout.ms": "set retry.deadline-ms instead",
    "delivery.timeout.ms": "set retry.deadline-ms instead",
    "compression.type": "set compression instead",
    "compression.codec": "set compression instead",
    "batch.size": "set max-batch-bytes instead",
    "message.max.bytes": "set max-batch-bytes instead",
    "request.timeout.ms": "set request-timeout-ms instead",
}
# A source cluster has config keys of its own for these.
_SOURCE_KEYS = {"isolation.level": "set isolation-level instead", "group.id": "set group-id instead"}
# Key prefixes the security block owns (credentials, TLS material).
OWNED_PREFIXES: dict[str, str] = {
    "sasl.": "set security.sasl instead",
    "enable.sasl.": "set security.sasl instead",
    "ssl.": "set security.tls instead",
    "ssl_": "set security.tls instead",
    "enable.ssl.": "set security.tls instead",
    "mirror-v3.": "reserved for mirror-v3's own settings",
}


def owned_reason(key: str, client: str) -> str | None:
    """Why `key` cannot be passed to the source's ("consumer") or destination's ("producer") clients, or None."""
    name = key.strip().lower()
    reason = (_SOURCE_KEYS.get(name) if client == "consumer" else None) or OWNED_PROPERTIES.get(name)
    if reason is not None:
        return reason
    for prefix, why in OWNED_PREFIXES.items():
        if name.startswith(prefix):
            return why
    if key.endswith("_cb"):
        return "a callback, which a config file cannot hold"
    return None


def as_librdkafka(properties: Mapping[str, ClientPropertyValue]) -> dict[str, str]:
    """The map as librdkafka strings (true/false for booleans)."""
    return {key: _text(value) for key, value in properties.items()}


def _text(value: ClientPropertyValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def client_properties_problem(
    properties: Mapping[str, ClientPropertyValue], client: str, library_check: LibraryCheck | None = None
) -> tuple[str, str] | None:
    """The first key that cannot be passed through (key, problem): one mirror-v3 owns, or one `library_check`
    refuses (unknown name, invalid value) for a `client` ("consumer" or "producer")."""
    for key in properties:
        reason = owned_reason(key, client)
        if reason is not None:
            return key, reason
    if properties and library_check is not None:
        refused = library_check(as_librdkafka(properties), client)
        if refused is not None:
            return refused
    return None
