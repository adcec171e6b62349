"""`migrate-schemas`: copy the subjects of a config's entries with `schemas` to the destination registry ahead of a
cutover, each as its entry's mode copies it while mirroring (strict: an exact copy; lenient: the source's versions
in order among the destination's own), then the compatibility level set on each source subject. `--dry-run`
reads both registries and prints what it would register and set, writing nothing.

Which subjects: under the `topic` strategy, `<topic>-key` / `<topic>-value` of every topic the entry selects now
(for the fields it mirrors), where the source registry has them; under `record` and `topic-record`, subjects are
named after record types, which only the records tell: `--subjects REGEX` picks source subjects by name (for every
entry, added to the topic subjects). Copying is the mirror's own (`sinks.schema_mapping`), so a rerun registers
nothing, and a mirror started afterwards finds its subjects ready.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import anyio.to_thread

from config.estate import MirrorSpec, compile_entries
from config.model import Config, KafkaDestination, SchemaMode, SchemasConfig
from kafka_clients.schema_registry import RegistryAccess, RegistryClient, Schema
from kafka_clients.settings import registry_access
from sinks.schema_mapping import Field, SchemaCopyError, SchemaIdMap, SubjectNames, SubjectStrategy, same_schema
from source.lookup import source_registry
from source.offsets import SourceClusters
from supervisor.discovery import plan_estate


@dataclass
class SubjectCopy:
    """One subject's copy: what was (or would be) registered and set."""

    source_subject: str
    destination_subject: str
    mode: str
    versions: int  # the source subject's
    missing: list[int] = field(default_factory=list)  # source versions the destination lacked
    compatibility: str | None = None  # the source subject's own level, set on the destination subject
    problem: str | None = None  # strict: why the destination subject is not a copy (the real run stops there)

    def line(self, dry_run: bool) -> str:
        verb = "would register" if dry_run else "registered"
        versions = ", ".join(map(str, self.missing)) or "none"
        text = (
            f"{self.source_subject} -> {self.destination_subject} ({self.mode}): {self.versions} versions, "
            f"{verb} {versions}"
        )
        if self.compatibility is not None:
            text += f"; compatibility {self.compatibility}"
        return text + (f"; {self.problem}" if self.problem else "")


async def migrate_schemas(config: Config, *, dry_run: bool, subjects: re.Pattern[str] | None = None) -> list[str]:
    """Copy (or, dry, survey) every subject; the lines the command prints. SchemaCopyError: strict found a
    destination subject that is not a copy (after the dry run has listed every subject)."""
    destination = config.destination
    if not isinstance(destination, KafkaDestination) or destination.schema_registry is None:
        return ["no entry copies schemas: nothing to migrate"]
    clusters = SourceClusters()
    try:
        plan = await plan_estate(clusters, compile_entries(config), None)
    finally:
        await clusters.close()
    target = registry_access(destination.schema_registry, "destination.schema-registry")
    work = _subjects_of(plan.mirrors)
    if not work:
        return ["no entry copies schemas: nothing to migrate"]
    copies = await anyio.to_thread.run_sync(_copy_all, work, target, subjects, dry_run)
    lines = [copy.line(dry_run) for copy in copies]
    registered = sum(len(copy.missing) for copy in copies)
    lines.append(f"{len(copies)} subjects, {registered} versions {'to register' if dry_run else 'registered'}")
    refused = [copy for copy in copies if copy.problem is not None]
    if refused and not dry_run:
        raise SchemaCopyError(refused[0].destination_subject, None, refused[0].problem or "")
    return lines


@dataclass(frozen=True)
class _Entry:
    """What one entry with schemas copies: its registries, its modes and the topics it selects now."""

    source: RegistryAccess
    schemas: SchemasConfig
    topics: dict[str, str]  # source topic -> destination topic


def _subjects_of(mirrors: tuple[MirrorSpec, ...]) -> list[_Entry]:
    entries: dict[int, _Entry] = {}
    for mirror in mirrors:
        if mirror.schemas is None:
            continue
        found = entries.get(mirror.entry)
        if found is None:
            registry = source_registry(mirror)
            assert registry is not None, "config.loader checks that an entry with schemas has its registry"
            found = entries[mirror.entry] = _Entry(registry, mirror.schemas, {})
        found.topics[mirror.topic] = mirror.destination_name
    return list(entries.values())


def _copy_all(
    entries: list[_Entry], target: RegistryAccess, pattern: re.Pattern[str] | None, dry_run: bool
) -> list[SubjectCopy]:
    destination = RegistryClient(target)
    copies: list[SubjectCopy] = []
    for entry in entries:
        source = RegistryClient(entry.source)
        listed = source.subjects()
        # (subject, field, strategy, source topic, destination topic)
        chosen: list[tuple[str, Field, SubjectStrategy, str, str]] = []
        strategy = entry.schemas.subject_name_strategy
        fields: tuple[tuple[Field, SchemaMode], ...] = (("key", entry.schemas.key), ("value", entry.schemas.value))
        for field_name, mode in fields:
            if mode == "off":
                continue
            for topic, renamed in sorted(entry.topics.items()):
                if strategy == "topic" and f"{topic}-{field_name}" in listed:
                    chosen.append((f"{topic}-{field_name}", field_name, strategy, topic, renamed))
        if pattern is not None:
            named: Field = "value" if entry.schemas.value != "off" else "key"
            topic, renamed = next(iter(sorted(entry.topics.items())), ("", ""))
            known = {subject for subject, *_ in chosen}
            # Named after a record type: kept as it is (record), or given the destination topic (topic-record).
            by_name: SubjectStrategy = "record" if strategy == "topic" else strategy
            chosen += [(s, named, by_name, topic, renamed) for s in listed if pattern.fullmatch(s) and s not in known]
        for subject, field_name, rule, topic, renamed in chosen:
            mode = entry.schemas.value if field_name == "value" else entry.schemas.key
            names = SubjectNames(rule, topic, renamed, field_name)
            copies.append(_copy_one(source, destination, subject, names, mode, dry_run))
    return copies


def _copy_one(
    source: RegistryClient, destination: RegistryClient, subject: str, names: SubjectNames, mode: str, dry_run: bool
) -> SubjectCopy:
    target = names.destination_subject(subject)
    versions = source.versions(subject)
    copy_mode: SchemaMode = "strict" if mode == "strict" else "lenient"
    # Each version as the destination would hold it: its references at the destination's versions; None while a
    # referenced version is not there yet (then the version itself cannot be there either).
    reading = SchemaIdMap(source, destination, copy_mode, names, read_only=True)
    wanted = [_destination_form(reading, source.version(subject, v).schema) for v in versions]
    copy = SubjectCopy(subject, target, mode, len(versions), compatibility=source.compatibility(subject))
    copy.missing = [
        v for v, form in zip(versions, wanted, strict=True) if form is None or destination.lookup(target, form) is None
    ]
    if mode == "strict":
        present = destination.versions(target)
        for index, version in enumerate(present):
            kept = destination.version(target, version).schema
            form = wanted[index] if index < len(wanted) else None
            if form is None or not same_schema(kept, form):
                copy.problem = f"not a copy: destination version {version} is not source version {index + 1}"
                return copy
    if dry_run:
        return copy
    SchemaIdMap(source, destination, copy_mode, names).copy_subject(subject)
    if copy.compatibility is not None:
        destination.set_compatibility(target, copy.compatibility)
    return copy


def _destination_form(reading: SchemaIdMap, schema: Schema) -> Schema | None:
    try:
        return reading.destination_form(schema)
    except SchemaCopyError:
        return None
