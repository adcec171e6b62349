"""Which destination schema ID a mirrored record's key or value must carry: the source registry's ID of its schema
turned into the destination registry's ID of the same schema, under the destination's subject, copying the
subject's versions there as the mode asks.

- **strict**: the destination subject is an exact copy of the source subject: the same schemas as the same
  versions, in the same order. A missing subject, or one that is a prefix of the source's, is completed by
  registering the source's versions in order; any other difference stops the mirror (`SchemaCopyError`, naming
  the subject and version).
- **lenient**: every source version up to the record's exists in the destination subject, in the same relative
  order; the destination may hold versions of its own in between. A missing one is registered (after the earlier
  ones, so the order holds).

The subject follows the producers' subject-name strategy: `topic` (<topic>-key / <topic>-value), `record` (the
record's full name) or `topic-record` (<topic>-<record name>); a renamed destination topic renames the subjects
that carry the topic's name. Referenced schemas (Avro named types, Protobuf imports, JSON `$ref`s) are copied
first, under their own subject names, and the references point at the destination's versions.

Cost: once per source ID, O(versions of its subject) registry requests (each version read, looked up and perhaps
registered); then a dict lookup per record. `SchemaIdMap` keeps the answers for the life of the Python worker.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Literal, Protocol

from config.model import SchemaMode
from core.errors import MirrorV3Error
from kafka_clients.schema_registry import Reference, RegistryRequestError, Schema, SubjectVersion

SubjectStrategy = Literal["topic", "record", "topic-record"]
Field = Literal["key", "value"]
FIELDS: tuple[Field, ...] = ("key", "value")


class SourceRegistry(Protocol):
    """The calls of kafka_clients.schema_registry.RegistryClient this module makes of a source registry (a live one,
    or an archive's documents: `sinks.schemas.archived`)."""

    @property
    def url(self) -> str: ...

    def schema(self, schema_id: int) -> Schema: ...

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]: ...

    def versions(self, subject: str) -> list[int]: ...

    def version(self, subject: str, version: int) -> SubjectVersion: ...


class Registry(SourceRegistry, Protocol):
    """The calls this module makes of a destination registry."""

    def lookup(self, subject: str, schema: Schema) -> SubjectVersion | None: ...

    def register(self, subject: str, schema: Schema) -> int: ...


class SchemaCopyError(MirrorV3Error):
    """The destination subject cannot be what the mode asks of it; names the subject and version."""

    def __init__(self, subject: str, version: int | None, problem: str) -> None:
        self.subject, self.version, self.problem = subject, version, problem
        where = f"subject {subject!r}" + ("" if version is None else f" version {version}")
        super().__init__(f"schemas: {where}: {problem}")


@dataclass(frozen=True)
class SubjectNames:
    """How a mirror's subjects are named at the source and at the destination."""

    strategy: SubjectStrategy
    source_topic: str
    destination_topic: str
    field: Field

    def source_subject(self, schema_id: int, schema: Schema, registered: list[str]) -> str:
        """The subject the producers registered the schema under, among those it is registered as."""
        topic_subject = f"{self.source_topic}-{self.field}"
        record = record_name(schema)
        if self.strategy == "topic":
            wanted = [topic_subject]
        elif self.strategy == "record":
            wanted = [record] if record else []
        else:
            wanted = [f"{self.source_topic}-{record}"] if record else []
        for subject in wanted:
            if subject in registered:
                return subject
        prefix = f"{self.source_topic}-"
        fallback = [s for s in registered if (self.strategy == "record") != s.startswith(prefix)]
        if self.strategy != "topic" and len(fallback) == 1:
            return fallback[0]
        expected = wanted[0] if wanted else f"a {self.strategy} subject"
        raise SchemaCopyError(
            expected,
            None,
            f"schema ID {schema_id} is not registered under it (subject-name-strategy {self.strategy}; it is "
            f"registered under {', '.join(sorted(registered)) or 'no subject'})",
        )

    def destination_subject(self, source_subject: str) -> str:
        if self.strategy == "topic":
            return f"{self.destination_topic}-{self.field}"
        if self.strategy == "topic-record":
            return f"{self.destination_topic}-{source_subject.removeprefix(f'{self.source_topic}-')}"
        return source_subject


def record_name(schema: Schema) -> str | None:
    """The full name of the schema's record: Avro's namespace.name, JSON Schema's title, the first Protobuf
    message with its package."""
    if schema.schema_type == "PROTOBUF":
        package, message = "", None
        for line in schema.text.splitlines():
            words = line.replace(";", " ").replace("{", " ").split()
            if len(words) >= 2 and words[0] == "package" and not package:
                package = words[1]
            elif len(words) >= 2 and words[0] == "message":
                message = words[1]
                break
        return None if message is None else f"{package}.{message}" if package else message
    try:
        parsed = json.loads(schema.text)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    if schema.schema_type == "JSON":
        title = parsed.get("title")
        return title if isinstance(title, str) else None
    name, namespace = parsed.get("name"), parsed.get("namespace")
    if not isinstance(name, str):
        return None
    return name if "." in name or not isinstance(namespace, str) or not namespace else f"{namespace}.{name}"


def same_schema(one: Schema, other: Schema) -> bool:
    """The same schema, whatever the registry did to its whitespace and key order (JSON-based types)."""
    if (one.schema_type, one.references) != (other.schema_type, other.references):
        return False
    if one.schema_type == "PROTOBUF":
        return one.text.split() == other.text.split()
    try:
        return bool(json.loads(one.text) == json.loads(other.text))
    except ValueError:
        return one.text == other.text


@dataclass
class _Copied:
    """A source subject's versions known at the destination: source version -> (destination ID, version)."""

    versions: dict[int, tuple[int, int]]


class SchemaIdMap:
    """Source schema IDs to destination schema IDs for one mirror's keys or values."""

    def __init__(
        self,
        source: SourceRegistry,
        destination: Registry,
        mode: SchemaMode,
        names: SubjectNames,
        read_only: bool = False,
    ) -> None:
        """`read_only` (verify): nothing is registered; a version the destination lacks is a SchemaCopyError."""
        assert mode != "off"
        self._source, self._destination, self._mode, self._names = source, destination, mode, names
        self._read_only = read_only
        self._ids: dict[int, int] = {}
        self._copied: dict[tuple[str, str], _Copied] = {}

    def destination_id(self, source_id: int) -> int:
        found = self._ids.get(source_id)
        if found is None:
            schema = self._source.schema(source_id)
            registered = self._source.subjects_of(source_id)
            subject = self._names.source_subject(source_id, schema, [s for s, _ in registered])
            version = max(v for s, v in registered if s == subject)
            found, _ = self._copy(subject, version, self._names.destination_subject(subject))
            self._ids[source_id] = found
        return found

    def copy_subject(self, subject: str) -> str:
        """Make the destination hold every version of the source `subject` as the mode asks (`migrate-schemas`);
        the destination subject."""
        target = self._names.destination_subject(subject)
        versions = self._source.versions(subject)
        if versions:
            self._copy(subject, versions[-1], target)
        return target

    def _copy(self, subject: str, upto: int, target: str) -> tuple[int, int]:
        """Make `target` hold the source versions of `subject` up to `upto` as the mode asks; the destination's
        (ID, version) of `upto`."""
        copied = self._copied.setdefault((subject, target), _Copied({}))
        if upto not in copied.versions:
            source_versions = self._source.versions(subject)
            if upto not in source_versions:
                raise SchemaCopyError(subject, upto, "the source registry no longer holds this version")
            if self._mode == "strict":
                self._copy_strict(subject, source_versions, upto, target, copied)
            else:
                self._copy_lenient(subject, [v for v in source_versions if v <= upto], target, copied)
        return copied.versions[upto]

    def _copy_strict(self, subject: str, source: list[int], upto: int, target: str, copied: _Copied) -> None:
        present = self._destination.versions(target)
        if len(present) > len(source):
            raise SchemaCopyError(
                target,
                present[len(source)],
                f"the destination subject has {len(present)} versions, the source subject {subject!r} {len(source)}: "
                "not a copy (use schemas: lenient to allow versions of the destination's own)",
            )
        previous = 0
        for index, version in enumerate(source[: source.index(upto) + 1]):
            wanted = self._destination_schema(self._source.version(subject, version).schema)
            if index < len(present):
                found = self._destination.version(target, present[index])
                if not same_schema(found.schema, wanted):
                    raise SchemaCopyError(
                        target,
                        found.version,
                        f"differs from version {version} of the source subject {subject!r}: not a copy (use "
                        "schemas: lenient to allow versions of the destination's own)",
                    )
            else:  # the destination is a prefix of the source: the next version is appended
                found = self._registered(target, wanted, version)
                if found.version <= previous:
                    raise SchemaCopyError(
                        target, found.version, f"version {version} of {subject!r} is already an earlier version here"
                    )
            previous = found.version
            copied.versions[version] = (found.schema_id, found.version)

    def _copy_lenient(self, subject: str, source: list[int], target: str, copied: _Copied) -> None:
        last = 0
        for version in source:
            known = copied.versions.get(version)
            if known is None:
                wanted = self._destination_schema(self._source.version(subject, version).schema)
                found = self._destination.lookup(target, wanted)
                if found is None:
                    found = self._registered(target, wanted, version)
                known = copied.versions[version] = (found.schema_id, found.version)
            if known[1] <= last:
                raise SchemaCopyError(
                    target,
                    known[1],
                    f"holds version {version} of the source subject {subject!r} before an earlier one: the source's "
                    "order is not kept",
                )
            last = known[1]

    def destination_form(self, schema: Schema) -> Schema:
        """`schema` as the destination holds it: its references pointing at the destination's versions (copied
        there first; with `read_only`, a SchemaCopyError when one is not there yet)."""
        return self._destination_schema(schema)

    def _destination_schema(self, schema: Schema) -> Schema:
        """`schema` with its references pointing at the destination's versions (copied there first)."""
        if not schema.references:
            return schema
        references = []
        for reference in schema.references:
            _, version = self._copy(reference.subject, reference.version, reference.subject)
            references.append(Reference(reference.name, reference.subject, version))
        return dataclasses.replace(schema, references=tuple(references))

    def _registered(self, subject: str, schema: Schema, source_version: int) -> SubjectVersion:
        if self._read_only:
            raise SchemaCopyError(subject, None, f"lacks version {source_version} of the source subject")
        try:
            self._destination.register(subject, schema)
        except RegistryRequestError as exc:
            # Another writer (a task of another Python worker) registered it at the same moment: some registries
            # (Apicurio) answer the loser with 409 instead of the version. It is there: carry on.
            if exc.status != 409 or self._destination.lookup(subject, schema) is None:
                raise
        found = self._destination.lookup(subject, schema)
        if found is None:
            raise SchemaCopyError(subject, None, f"registered, then not found in {self._destination.url}")
        return found


class PlannedRegistry:
    """A destination registry as it would be after the registrations asked of it, none of them made: reads see the
    real registry and the planned registrations, `register` only plans (`--dry-run`, and the checks a real run makes
    before it writes anything). So a `SchemaIdMap` over it runs every check the real copy runs (a strict subject that
    is not a copy, a lenient one whose order differs, a version or reference the source lacks) without writing.

    A planned schema gets an ID below 0 (never a registry's); `planned` lists the registrations in order."""

    def __init__(self, real: Registry) -> None:
        self.url = real.url
        self._real = real
        self.planned: list[SubjectVersion] = []

    def _of(self, subject: str) -> list[SubjectVersion]:
        return [found for found in self.planned if found.subject == subject]

    def schema(self, schema_id: int) -> Schema:
        for found in self.planned:
            if found.schema_id == schema_id:
                return found.schema
        return self._real.schema(schema_id)

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        planned = [(found.subject, found.version) for found in self.planned if found.schema_id == schema_id]
        return planned or self._real.subjects_of(schema_id)

    def versions(self, subject: str) -> list[int]:
        return self._real.versions(subject) + [found.version for found in self._of(subject)]

    def version(self, subject: str, version: int) -> SubjectVersion:
        for found in self._of(subject):
            if found.version == version:
                return found
        return self._real.version(subject, version)

    def lookup(self, subject: str, schema: Schema) -> SubjectVersion | None:
        for found in self._of(subject):
            if same_schema(found.schema, schema):
                return found
        return self._real.lookup(subject, schema)

    def register(self, subject: str, schema: Schema) -> int:
        found = self.lookup(subject, schema)
        if found is not None:
            return found.schema_id
        version = max(self.versions(subject), default=0) + 1
        planned = SubjectVersion(subject, version, -1 - len(self.planned), schema)
        self.planned.append(planned)
        return planned.schema_id
