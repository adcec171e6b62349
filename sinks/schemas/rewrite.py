"""A mirror's schema-registry rewriting, as its Kafka produce tasks apply it: each key or value in the registry's
wire format (`core.schema_wire`) leaves with the destination registry's ID of its schema (`sinks.schemas.mapping`
decides it and copies the subject); anything else leaves as it came and is counted.

`SchemaRewrite` is the frozen value the driver puts in the task's target; `rewriter_for` gives the Python worker's
one `RecordRewriter` for it, so IDs are resolved once per worker, not per task. The registries are asked through
`retry_transient_sync` with the destination's retry policy: a registry that does not answer is waited for, inside
the task, until the retry deadline (its records wait with it: nothing is produced with an ID not yet known), then
the mirror fails naming the registry. Asking again is safe: reads change nothing, and registering a schema a subject
holds answers its existing version.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from config.model import SchemaMode
from core.process_cache import PerProcess
from core.retry import RetryPolicy
from core.schema_wire import HEADER, MAGIC, with_schema_id
from kafka_clients.schema_registry import (
    RegistryAccess,
    RegistryClient,
    RegistryUnavailableError,
    Schema,
    SubjectVersion,
    registry_for,
)
from sinks.retry import TransientDestinationError, retry_transient_sync
from sinks.schemas.archived import ArchivedRegistry, ArchivedSchemas
from sinks.schemas.mapping import Field, SchemaIdMap, SourceRegistry, SubjectNames, SubjectStrategy

T = TypeVar("T")


class _KeyValue(Protocol):
    """A record: a frozen dataclass with a key and a value (kafka_clients' KafkaRecord, workers' Record)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...


R = TypeVar("R", bound=_KeyValue)


@dataclass(frozen=True)
class SchemaRewrite:
    source_registry: RegistryAccess | ArchivedSchemas  # a live registry (run), an archive's documents (restore)
    destination_registry: RegistryAccess
    key: SchemaMode
    value: SchemaMode
    strategy: SubjectStrategy
    source_topic: str
    destination_topic: str
    retry: RetryPolicy
    read_only: bool = False  # verify: look up, never register


class RegistryOutageError(TransientDestinationError):
    """A registry did not answer; asked again until the retry deadline."""

    def __init__(self, cause: RegistryUnavailableError) -> None:
        self.registry, self.request, self.reason = cause.registry, cause.request, cause.reason
        super().__init__(str(cause))


class RetryingRegistry:
    """A registry client whose every call is asked again while the registry does not answer."""

    def __init__(self, client: RegistryClient, policy: RetryPolicy) -> None:
        self.url = client.url
        self._client, self._policy = client, policy

    def _call(self, what: str, call: Callable[[], T]) -> T:
        def attempt() -> T:
            try:
                return call()
            except RegistryUnavailableError as exc:
                raise RegistryOutageError(exc) from None

        return retry_transient_sync(attempt, self._policy, f"schema registry {self.url}: {what}")

    def schema(self, schema_id: int) -> Schema:
        return self._call(f"schema {schema_id}", lambda: self._client.schema(schema_id))

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        return self._call(f"subjects of {schema_id}", lambda: self._client.subjects_of(schema_id))

    def versions(self, subject: str) -> list[int]:
        return self._call(f"versions of {subject}", lambda: self._client.versions(subject))

    def version(self, subject: str, version: int) -> SubjectVersion:
        return self._call(f"{subject} version {version}", lambda: self._client.version(subject, version))

    def lookup(self, subject: str, schema: Schema) -> SubjectVersion | None:
        return self._call(f"lookup in {subject}", lambda: self._client.lookup(subject, schema))

    def register(self, subject: str, schema: Schema) -> int:
        return self._call(f"register in {subject}", lambda: self._client.register(subject, schema))


class RecordRewriter:
    """Rewrites the keys and values of one mirror's records (the produce task counts those not in the wire format)."""

    def __init__(self, rewrite: SchemaRewrite) -> None:
        source: SourceRegistry
        if isinstance(rewrite.source_registry, ArchivedSchemas):
            source = ArchivedRegistry(rewrite.source_registry)
        else:
            source = RetryingRegistry(registry_for(rewrite.source_registry), rewrite.retry)
        destination = RetryingRegistry(registry_for(rewrite.destination_registry), rewrite.retry)

        def mapping(field: Field, mode: SchemaMode) -> SchemaIdMap | None:
            names = SubjectNames(rewrite.strategy, rewrite.source_topic, rewrite.destination_topic, field)
            return None if mode == "off" else SchemaIdMap(source, destination, mode, names, rewrite.read_only)

        self._maps: dict[Field, SchemaIdMap | None] = {
            "key": mapping("key", rewrite.key),
            "value": mapping("value", rewrite.value),
        }
        self._lock = threading.Lock()  # a worker may run several tasks of the mirror in threads
        self._headers: dict[Field, dict[bytes, bytes]] = {"key": {}, "value": {}}  # source header -> destination's

    def rewritten(self, data: bytes | None, field: Field) -> tuple[bytes | None, bool]:
        """`data` as the destination must hold it, and whether it was in the wire format (off: always True). Per
        record: a dict lookup of its 5-byte header and one copy of the data; the registries only for a new ID."""
        mapping = self._maps[field]
        if mapping is None:
            return data, True
        if data is None or len(data) < HEADER or data[0] != MAGIC:
            return data, False
        header = data[:HEADER]
        headers = self._headers[field]
        replacement = headers.get(header)  # read without the lock: a dict lookup is atomic, entries only added
        if replacement is None:
            with self._lock:
                destination_id = mapping.destination_id(int.from_bytes(header[1:], "big"))
            replacement = headers[header] = with_schema_id(header, destination_id)
        if replacement == header:
            return data, True
        return b"".join((replacement, memoryview(data)[HEADER:])), True

    def as_written(self, record: R) -> R:
        """A source record (any dataclass with `key` and `value`) as the tasks write it: for preserve's restart check
        and verify, which compare it with the destination's."""
        key, _ = self.rewritten(record.key, "key")
        value, _ = self.rewritten(record.value, "value")
        return dataclasses.replace(record, key=key, value=value)  # type: ignore[type-var]  # a dataclass, by contract


_rewriters: PerProcess[SchemaRewrite, RecordRewriter] = PerProcess(RecordRewriter)


def rewriter_for(rewrite: SchemaRewrite) -> RecordRewriter:
    """This Python worker's rewriter of `rewrite` (its IDs resolved once for every task it runs)."""
    return _rewriters.get(rewrite)
