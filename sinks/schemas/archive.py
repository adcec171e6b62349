"""Keeping in a blob archive the source schemas its records reference (`sinks.schemas.archived` says what and why).

A blob task notes the schema IDs its records' keys and values carry (`Written.schema_ids`); before the sink commits
the blob, `SchemaArchive.keep` makes sure the archive holds a document for each, and for what each needs to be
copied again later: the earlier versions of its subjects and the schemas it references, recursively. Documents are
written needed-first, each whole (`sinks.archive.documents`), so any committed blob's schemas are all in the archive,
and so are their dependencies, even after a crash between two documents: a document is only ever written after
everything it needs.

A registry that does not answer is a transient destination failure (`RegistryOutageError`): the commit waits for it
as for a store that does not answer, within the retry deadline, and nothing is committed meanwhile. Asking again is
safe: the registry is only read, and a document that exists is left as it is.

Cost: one listing of the topic's `_schemas` per process; then per new schema ID, a few registry requests per version
of its subjects and one small write per document; nothing for an ID already kept (a set lookup per blob's IDs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import anyio
import anyio.to_thread

from kafka_clients.schema_registry import RegistryAccess, RegistryClient, RegistryUnavailableError, registry_for
from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.schemas.archived import (
    ArchivedReference,
    ArchivedSchema,
    ArchivedSchemas,
    decode,
    document_name,
    encode,
    id_of,
    schema_directory,
)
from sinks.schemas.mapping import Field
from sinks.schemas.rewrite import RegistryOutageError

T = TypeVar("T")


class SchemaArchive:
    """The schema documents of one archived topic, shared by the sinks of its partitions in one process."""

    def __init__(
        self,
        store: ArchiveDocuments,
        destination_name: str,
        registry: RegistryAccess,
        fields: tuple[Field, ...],
        source_cluster: str,
        source_topic: str,
        clock: Callable[[], float] = time.time,
        client: RegistryClient | None = None,
    ) -> None:
        """`fields`: whether keys, values or both are in the registry's wire format (the mirror's `schemas`)."""
        self.fields = fields
        self._store, self._directory = store, schema_directory(destination_name)
        self._registry, self._client = registry, client
        self._cluster, self._topic, self._clock = source_cluster, source_topic, clock
        self._held: set[int] | None = None  # IDs with a document in the archive (listed once, then kept up to date)
        self._lock = anyio.Lock()

    @property
    def location(self) -> str:
        return self._store.location(self._directory)

    async def keep(self, schema_ids: Iterable[int]) -> None:
        """Return once the archive holds a document for each of `schema_ids` and for all they need."""
        wanted = set(schema_ids)
        if self._held is not None and wanted <= self._held:
            return
        async with self._lock:  # one partition fetches and writes a new schema; the others find it held
            if self._held is None:
                self._held = {i for i in map(id_of, await self._store.listing(self._directory)) if i is not None}
            held = self._held
            if wanted <= held:
                return
            documents = await anyio.to_thread.run_sync(self._gather, wanted - held, frozenset(held))
            for document in documents:  # needed-first: a document is never in the archive before what it needs
                await self._store.add(self._directory, document_name(document.id), encode(document))
                held.add(document.id)

    async def unresolved(self, schema_ids: Iterable[int]) -> list[int]:
        """The IDs of `schema_ids` the archive holds no readable document of (verify): one listing, one read each."""
        names = set(await self._store.listing(self._directory))
        missing = []
        for schema_id in sorted(set(schema_ids)):
            name = document_name(schema_id)
            document = decode(await self._store.read(self._directory, name)) if name in names else None
            if document is None or document.id != schema_id:
                missing.append(schema_id)
        return missing

    def _gather(self, missing: set[int], held: frozenset[int]) -> list[ArchivedSchema]:
        """The documents `missing` needs that the archive does not hold, each after those it needs (in a thread)."""
        if self._client is None:
            self._client = registry_for(self._registry)
        client = self._client
        ordered: dict[int, ArchivedSchema] = {}
        started: set[int] = set()
        versions: dict[str, list[int]] = {}
        seen_at = moment_text(int(self._clock() * 1000))

        def ask(call: Callable[[], T]) -> T:
            try:
                return call()
            except RegistryUnavailableError as exc:
                raise RegistryOutageError(exc) from None

        def need_version(subject: str, version: int) -> None:
            need_id(ask(lambda: client.version(subject, version)).schema_id)

        def need_id(schema_id: int) -> None:
            if schema_id in held or schema_id in started:
                return
            started.add(schema_id)  # a schema's subjects' earlier versions never lead back to it: no cycle
            schema = ask(lambda: client.schema(schema_id))
            subjects = ask(lambda: client.subjects_of(schema_id))
            for reference in schema.references:
                need_version(reference.subject, reference.version)
            for subject, version in subjects:
                if subject not in versions:
                    versions[subject] = ask(lambda subject=subject: client.versions(subject))  # type: ignore[misc]
                for earlier in versions[subject]:
                    if earlier < version:
                        need_version(subject, earlier)
            ordered[schema_id] = ArchivedSchema(
                id=schema_id,
                schema_type=schema.schema_type,
                schema=schema.text,
                references=tuple(ArchivedReference(r.name, r.subject, r.version) for r in schema.references),
                subjects=tuple(sorted(subjects)),
                source_cluster=self._cluster,
                source_topic=self._topic,
                registry=client.url,
                seen_at=seen_at,
                metadata=schema.metadata,
                rule_set=schema.rule_set,
            )

        for schema_id in sorted(missing):
            need_id(schema_id)
        return list(ordered.values())


async def read_schemas(store: ArchiveDocuments, destination_name: str) -> ArchivedSchemas:
    """Every schema document of an archived topic (a restore's source registry): one listing and one read each."""
    directory = schema_directory(destination_name)
    found = [
        decode(await store.read(directory, name)) for name in await store.listing(directory) if id_of(name) is not None
    ]
    return ArchivedSchemas(destination_name, tuple(document for document in found if document is not None))
