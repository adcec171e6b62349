"""The schemas an archive keeps beside a topic's chains, and the read-only registry a restore makes of them.

An archived record whose key or value is in the registry's wire format carries a source registry's schema ID, which
means nothing once that registry is gone. So the archive keeps, beside the topic's chains, one JSON document per
schema ID its records reference (`sinks.schemas.archive` writes them before the blob that needs them is committed):

    <root or prefix>/<destination name>/_schemas/<source schema ID>.json

with the schema (text, type, references) and the subjects and versions it was registered as. With every schema the
archive holds, it also holds the earlier versions of its subjects and the schemas it references, so a restore can
copy subjects into a new registry exactly as a mirror copies them from a live one (`sinks.schemas.mapping`, strict or
lenient): `ArchivedRegistry` answers the calls a mirror makes of its source registry from these documents alone.

Pure: no I/O. Cost: `ArchivedSchemas` holds every document of one topic (a few hundred bytes to a few KiB each);
`ArchivedRegistry` indexes them once, then each call is a dict lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from core.errors import MirrorV3Error
from kafka_clients.schema_registry import Reference, Schema, SubjectVersion
from sinks.archive import documents as archive_documents

SCHEMA_DIRECTORY = "_schemas"
FORMAT = 1  # of the document; a reader skips documents of a format it does not know


class ArchivedReference(msgspec.Struct, frozen=True, rename="kebab"):
    name: str
    subject: str
    version: int


class ArchivedSchema(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    """One document: a source registry's schema, as the archived records of `source_topic` reference it."""

    id: int  # the source registry's ID, the one the archived records carry
    schema_type: str  # AVRO, JSON or PROTOBUF
    schema: str
    references: tuple[ArchivedReference, ...]
    subjects: tuple[tuple[str, int], ...]  # (subject, version) it was registered as, when archived
    source_cluster: str
    source_topic: str
    registry: str  # the source registry's URL, for people
    seen_at: str  # RFC 3339 UTC
    format: int = FORMAT
    # A data contract's parts, as the registry gave them (canonical JSON text); absent in documents archived before.
    metadata: str | None = None
    rule_set: str | None = None

    def as_schema(self) -> Schema:
        references = tuple(Reference(r.name, r.subject, r.version) for r in self.references)
        return Schema(self.schema, self.schema_type, references, self.metadata, self.rule_set)


def encode(schema: ArchivedSchema) -> bytes:
    return archive_documents.encode(schema)


def decode(data: bytes) -> ArchivedSchema | None:
    return archive_documents.decode(data, ArchivedSchema, FORMAT)


def schema_directory(destination_name: str) -> str:
    return f"{destination_name}/{SCHEMA_DIRECTORY}"


def document_name(schema_id: int) -> str:
    return f"{schema_id}.json"


def id_of(name: str) -> int | None:
    """The schema ID a document's name gives, or None for any other file."""
    stem = name.removesuffix(".json")
    return int(stem) if name.endswith(".json") and stem.isdigit() else None


class ArchivedSchemaMissingError(MirrorV3Error):
    """A schema ID, subject or version the archive does not hold: its records were archived without `schemas`, or
    the documents were removed."""

    def __init__(self, where: str, what: str) -> None:
        self.where, self.what = where, what
        super().__init__(
            f"schemas: {where} holds no schema document for {what}: the records were archived without schemas "
            "(restore them with schemas: off to copy their IDs as they are)"
        )


@dataclass(frozen=True)
class ArchivedSchemas:
    """Every schema document of one archived topic: the source registry of a restore (it travels to the tasks)."""

    destination_name: str  # the archived name whose `_schemas` they are
    documents: tuple[ArchivedSchema, ...]

    @property
    def url(self) -> str:
        return f"archive:{self.destination_name}/{SCHEMA_DIRECTORY}"

    @property
    def source_topic(self) -> str | None:
        """The topic the archived records came from (None: no document says it)."""
        return self.documents[0].source_topic if self.documents else None


class ArchivedRegistry:
    """The calls `sinks.schemas.mapping` makes of a source registry (`SourceRegistry`), answered from an archive's
    documents."""

    def __init__(self, archived: ArchivedSchemas) -> None:
        self.url = archived.url
        self._by_id = {document.id: document for document in archived.documents}
        self._by_version: dict[tuple[str, int], ArchivedSchema] = {}
        for document in archived.documents:
            for subject, version in document.subjects:
                self._by_version[(subject, version)] = document

    def schema(self, schema_id: int) -> Schema:
        return self._document(schema_id).as_schema()

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        return list(self._document(schema_id).subjects)

    def versions(self, subject: str) -> list[int]:
        return sorted(version for known, version in self._by_version if known == subject)

    def version(self, subject: str, version: int) -> SubjectVersion:
        document = self._by_version.get((subject, version))
        if document is None:
            raise ArchivedSchemaMissingError(self.url, f"subject {subject!r} version {version}")
        return SubjectVersion(subject, version, document.id, document.as_schema())

    def _document(self, schema_id: int) -> ArchivedSchema:
        found = self._by_id.get(schema_id)
        if found is None:
            raise ArchivedSchemaMissingError(self.url, f"schema ID {schema_id}")
        return found
