"""Which source partitions a config mirrors, under which names, and which process owns each.

Pure: frozen data in, frozen data out, no I/O and no clock. The caller reads the clusters' metadata
(topic → partition count) and passes it in; `expand` returns one `MirrorSpec` per selected partition.

- `compile_entries(config)` turns the `mirrors` entries into `Entry` values once: it resolves cluster
  references, compiles the regular expressions and applies the `defaults`, raising `ConfigError` with
  the field path for anything wrong. `check_offline` then finds the collisions visible without metadata
  (the single form, topics named in `topics`), which is what `validate` can promise.
- `expand(entries, metadata, shard)` matches the entries against the metadata. Single-form entries need
  no metadata: their mirror exists even when the topic does not, and its actor reports that as today.
- Two selected partitions writing the same destination (name, partition) raise
  `DestinationCollisionError`, naming both; so does one partition selected by two entries.
- A shard owns a partition when a stable hash of (cluster, topic, partition) modulo the shard count is
  its index: every process computes the same owner without talking to the others, and positions come
  from the destination, so moving a partition moves nothing else.

Cost: O(entries × topics) regex matches plus O(selected partitions); for 2 000 partitions in 200 topics,
a few milliseconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from config.errors import (
    ConfigError,
    DestinationCollisionError,
    FieldError,
    FieldPath,
    MirrorLoopError,
    SelectedPartition,
    format_path,
)
from config.model import (
    Config,
    DestinationNameRule,
    FlushConfig,
    KafkaDestination,
    MirrorConfig,
    SchemasConfig,
    SourceConfig,
)

# Kafka's own topics and the schema registry's: mirrored only when an entry names them in `topics`.
INTERNAL_TOPIC_PREFIX = "__"
INTERNAL_TOPICS = frozenset({"_schemas"})
_DESTINATION_NAME = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,249}$")

# Where a mirror with an empty destination begins: a position, or a record time (epoch ms).
StartAt = Literal["earliest", "latest"] | int

# cluster name → {topic → partition count}, as the caller read it from each cluster.
Metadata = Mapping[str, Mapping[str, int]]


def is_internal(topic: str) -> bool:
    return topic.startswith(INTERNAL_TOPIC_PREFIX) or topic in INTERNAL_TOPICS


@dataclass(frozen=True)
class Shard:
    """This process is shard `index` of `count` (0-based)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ConfigError(f"shard {self.index}/{self.count}", f"the index must be 0..{self.count - 1}")

    @classmethod
    def parse(cls, text: str, where: str) -> Shard:
        """`I/N`, as `--shard` and MIRROR_V3_SHARD take it; `where` names the flag or variable."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if match is None or int(match.group(2)) < 1:
            raise ConfigError(where, f"expected I/N with N >= 1 (this process's shard of N), got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if index >= count:
            raise ConfigError(where, f"shard index {index} is out of range for {count} shards (0..{count - 1})")
        return cls(index, count)

    def owner(self, cluster: str, topic: str, partition: int) -> int:
        return shard_of(cluster, topic, partition, self.count)

    def owns(self, cluster: str, topic: str, partition: int) -> bool:
        return self.owner(cluster, topic, partition) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(cluster: str, topic: str, partition: int, count: int) -> int:
    """Stable across processes, runs and Python versions (not `hash()`, which is salted per process)."""
    digest = hashlib.blake2b(f"{cluster}\0{topic}\0{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True)
class NameRule:
    """A `destination-name` rule, compiled."""

    prefix: str = ""
    suffix: str = ""
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    field: FieldPath = ("defaults", "destination-name")  # where it was written, for errors

    def apply(self, topic: str) -> str:
        name = topic if self.pattern is None else self.pattern.sub(self.replacement, topic)
        return f"{self.prefix}{name}{self.suffix}"


@dataclass(frozen=True)
class Entry:
    """One `mirrors` entry with its references resolved and its defaults applied."""

    index: int
    name: str
    cluster: str
    source: SourceConfig
    source_field: str  # where the source settings are written: "clusters.prod" or "mirrors[3].source"
    flush: FlushConfig
    rule: NameRule
    start_at: StartAt = "earliest"
    # The single form: exactly this (topic, partition), under `name`, with an optional fixed destination.
    single: tuple[str, int] | None = None
    override: str | None = None
    # A selection: named topics and / or a regex over all topics, minus `exclude`; partitions None = all.
    topics: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    exclude: re.Pattern[str] | None = None
    partitions: frozenset[int] | None = None
    on_destination: bool = False  # its source is the (Kafka) destination cluster: its copies could be read again
    schemas: SchemasConfig | None = None  # schema-registry mirroring of its keys and values (None or off: none)

    @property
    def field(self) -> str:
        return f"mirrors[{self.index}]"

    def selects(self, topic: str) -> bool:
        """Whether this selection takes `topic` (named topics always; regex matches never internal ones)."""
        if self.exclude is not None and self.exclude.fullmatch(topic):
            return False
        if topic in self.topics:
            return True
        return self.pattern is not None and not is_internal(topic) and self.pattern.fullmatch(topic) is not None

    def destination_name(self, topic: str) -> str:
        if self.override is not None:
            return self.override
        name = self.rule.apply(topic)
        if not _DESTINATION_NAME.match(name):
            raise FieldError(
                self.rule.field,
                f"topic {topic!r} becomes {name!r}, which is not a valid destination "
                "name (1-249 of letters, digits, '.', '_' and '-'; not '.' or '..')",
            )
        return name


@dataclass(frozen=True)
class MirrorSpec:
    """One mirror: a source partition, where it goes, and the settings it runs with."""

    name: str
    entry: int  # its entry's index in `mirrors`, for errors
    cluster: str
    source: SourceConfig
    source_field: str  # where the source settings are written, for errors: "clusters.prod", "mirrors[3].source"
    topic: str
    partition: int
    destination_name: str
    flush: FlushConfig
    start_at: StartAt = "earliest"
    single: bool = False  # from a single-form entry: configured by hand, so never dropped by discovery
    commit_group: str | None = None  # source.commit-source-offsets: the source group its position goes to
    schemas: SchemasConfig | None = None  # schema-registry mirroring of its keys and values (None: none)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)

    @property
    def selected(self) -> SelectedPartition:
        return SelectedPartition(self.entry, self.cluster, self.topic, self.partition)


@dataclass(frozen=True)
class MissingTopic:
    """A topic an entry names (`topics` or the single form) that its cluster does not have (yet)."""

    field: str
    cluster: str
    topic: str


@dataclass(frozen=True)
class EstatePlan:
    mirrors: tuple[MirrorSpec, ...]  # this shard's, sorted by (cluster, topic, partition)
    missing: tuple[MissingTopic, ...]  # named topics the metadata does not hold
    other_shards: int  # selected partitions another shard owns

    def by_key(self) -> dict[tuple[str, str, int], MirrorSpec]:
        return {spec.key: spec for spec in self.mirrors}


def cluster_name(source: SourceConfig) -> str:
    """The name of a cluster written out in an entry (`source:`): its bootstrap list, one per list."""
    return source.bootstrap_servers


def compile_entries(config: Config) -> tuple[Entry, ...]:
    """Every enabled entry, checked; raises ConfigError naming the field of the first problem."""
    destination_flush = config.destination.flush
    default_flush = config.defaults.flush or destination_flush
    default_rule = config.defaults.destination_name
    if default_rule is not None:
        _name_rule(default_rule, ("defaults", "destination-name"))
    entries: list[Entry] = []
    names: dict[str, int] = {}
    for index, mirror in enumerate(config.mirrors):
        if mirror.name in names:
            raise FieldError(
                ("mirrors", index, "name"),
                f"duplicate mirror name {mirror.name!r} (also mirrors[{names[mirror.name]}])",
            )
        names[mirror.name] = index
        entry = _compile(config, mirror, index, default_flush, default_rule)
        if mirror.enabled:
            entries.append(entry)
    return tuple(entries)


def _compile(
    config: Config,
    mirror: MirrorConfig,
    index: int,
    default_flush: FlushConfig,
    default_rule: DestinationNameRule | None,
) -> Entry:
    at: FieldPath = ("mirrors", index)
    if mirror.cluster is not None and mirror.source is not None:
        raise FieldError((*at, "source"), "set only one of `source` (a cluster written out) and `cluster` (a name)")
    if mirror.cluster is None and mirror.source is None:
        raise FieldError((*at, "source"), "required field is missing (or name a cluster of `clusters` in `cluster`)")
    if mirror.cluster is not None:
        source = config.clusters.get(mirror.cluster)
        if source is None:
            known = ", ".join(sorted(config.clusters)) or "none are defined"
            raise FieldError((*at, "cluster"), f"unknown cluster {mirror.cluster!r} (clusters: {known})")
        cluster, source_field = mirror.cluster, format_path(("clusters", mirror.cluster))
    else:
        assert mirror.source is not None
        source, cluster, source_field = mirror.source, cluster_name(mirror.source), format_path((*at, "source"))
    flush = mirror.flush or default_flush
    rule_config = mirror.destination_name or default_rule
    rule_field = (*at, "destination-name") if mirror.destination_name else ("defaults", "destination-name")
    rule = NameRule() if rule_config is None else _name_rule(rule_config, rule_field)

    if mirror.start_at is not None:
        start_at = _start_at(mirror.start_at, (*at, "start-at"))
    elif config.defaults.start_at is not None:
        start_at = _start_at(config.defaults.start_at, ("defaults", "start-at"))
    else:
        start_at = "earliest"

    destination = config.destination
    on_destination = isinstance(destination, KafkaDestination) and _servers(destination.bootstrap_servers) == _servers(
        source.bootstrap_servers
    )

    def entry(**form: object) -> Entry:
        return Entry(
            index=index,
            name=mirror.name,
            cluster=cluster,
            source=source,
            source_field=source_field,
            flush=flush,
            rule=rule,
            start_at=start_at,
            on_destination=on_destination,
            schemas=mirror.schemas if mirror.schemas is not None and mirror.schemas.on else None,
            **form,  # type: ignore[arg-type]
        )

    selection_keys = [k for k, v in (("topics", mirror.topics), ("topic-regex", mirror.topic_regex)) if v is not None]
    if mirror.topic is not None or mirror.partition is not None:
        if selection_keys:
            raise FieldError(
                (*at, selection_keys[0]),
                "an entry is either one topic + partition or a selection (topics, topic-regex), not both",
            )
        for key, value in (("exclude-regex", mirror.exclude_regex), ("partitions", mirror.partitions)):
            if value is not None:
                raise FieldError(
                    (*at, key), "only for a selection (topics, topic-regex); this entry names one partition"
                )
        if mirror.topic is None:
            raise FieldError((*at, "topic"), "required with `partition` (or select topics with topics / topic-regex)")
        if mirror.partition is None:
            raise FieldError(
                (*at, "partition"), f"required with `topic` (for every partition, write topics: [{mirror.topic}])"
            )
        single = entry(single=(mirror.topic, mirror.partition), override=mirror.destination_name_override)
        single.destination_name(mirror.topic)  # a rule that makes the name invalid fails here, offline
        return single
    if not selection_keys:
        raise FieldError(at, "select what to mirror: topic + partition, topics: [..] or topic-regex")
    if mirror.destination_name_override is not None:
        raise FieldError(
            (*at, "destination-name-override"),
            "only for one topic + partition; a selection takes a "
            "destination-name rule (prefix, suffix, regex, replacement)",
        )
    topics = tuple(dict.fromkeys(mirror.topics or ()))
    partitions = None if mirror.partitions in (None, "all") else frozenset(mirror.partitions)  # type: ignore[arg-type]
    selection = entry(
        topics=topics,
        pattern=_regex(mirror.topic_regex, (*at, "topic-regex")),
        exclude=_regex(mirror.exclude_regex, (*at, "exclude-regex")),
        partitions=partitions,
    )
    for topic in topics:
        selection.destination_name(topic)
    return selection


def _start_at(text: str, field: FieldPath) -> StartAt:
    if text in ("earliest", "latest"):
        return text  # type: ignore[return-value]
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise FieldError(
            field, f"expected earliest, latest or an ISO 8601 time with a zone (2026-11-01T00:00:00Z), got {text!r}"
        )
    return int(when.timestamp() * 1000)


def _regex(text: str | None, field: FieldPath) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise FieldError(field, f"invalid regular expression {text!r}: {exc.msg}{where}") from None


def _name_rule(rule: DestinationNameRule, field: FieldPath) -> NameRule:
    if (rule.regex is None) != (rule.replacement is None):
        missing = "replacement" if rule.replacement is None else "regex"
        raise FieldError((*field, missing), "`regex` and `replacement` go together")
    pattern = _regex(rule.regex, (*field, "regex"))
    if pattern is not None:
        assert rule.replacement is not None
        # Group references and escapes are checked when a replacement is used: use it once, on a match of
        # the same groups that always matches (the empty alternative).
        always = re.compile(f"(?:{pattern.pattern})|", pattern.flags)
        match = always.match("")
        assert match is not None
        try:
            match.expand(rule.replacement)
        except (re.error, IndexError) as exc:
            raise FieldError((*field, "replacement"), f"{rule.replacement!r}: {exc}") from None
    return NameRule(rule.prefix, rule.suffix, pattern, rule.replacement or "", field)


def _servers(bootstrap: str) -> frozenset[str]:
    return frozenset(server.strip().lower() for server in bootstrap.split(",") if server.strip())


def check_loop(entries: tuple[Entry, ...], entry: Entry, topic: str, destination: str) -> None:
    """MirrorLoopError when `entry` copies `topic` into a topic of the cluster it reads that an entry reads."""
    if not entry.on_destination:
        return
    for other in entries:
        if not other.on_destination:
            continue
        if (other.single is not None and other.single[0] == destination) or (
            other.single is None and other.selects(destination)
        ):
            raise MirrorLoopError(entry.index, topic, destination, other.index)


def check_offline(entries: Iterable[Entry]) -> None:
    """The collisions and loops visible without metadata: among single-form entries and topics named in
    `topics`, and a regex on the destination cluster whose copies keep their names. A named topic with
    `partitions: all` has at least partition 0, so two such topics mapped to one name collide there."""
    entries = tuple(entries)
    seen: dict[tuple[str, int], SelectedPartition] = {}
    for entry in entries:
        if entry.on_destination and entry.pattern is not None and entry.rule == NameRule(field=entry.rule.field):
            every = f"/{entry.pattern.pattern}/"  # each topic it selects would be written into itself
            raise MirrorLoopError(entry.index, every, every, entry.index)
        named: list[tuple[str, Iterable[int]]] = []
        if entry.single is not None:
            named.append((entry.single[0], (entry.single[1],)))
        for topic in entry.topics:
            if entry.exclude is not None and entry.exclude.fullmatch(topic):
                continue
            named.append((topic, sorted(entry.partitions) if entry.partitions is not None else (0,)))
        for topic, partitions in named:
            destination = entry.destination_name(topic)
            check_loop(entries, entry, topic, destination)
            for partition in partitions:
                _claim(seen, (destination, partition), SelectedPartition(entry.index, entry.cluster, topic, partition))


def _claim(
    seen: dict[tuple[str, int], SelectedPartition], target: tuple[str, int], selected: SelectedPartition
) -> None:
    first = seen.get(target)
    if first is not None:
        raise DestinationCollisionError(first, selected, *target)
    seen[target] = selected


def expand(entries: Iterable[Entry], metadata: Metadata, shard: Shard | None = None) -> EstatePlan:
    """Every (cluster, topic, partition) the entries select in `metadata`; this shard's become mirrors.

    A selection entry whose cluster is absent from `metadata` selects nothing (its caller could not
    read that cluster); single-form entries never need metadata."""
    entries = tuple(entries)
    specs: list[MirrorSpec] = []
    missing: list[MissingTopic] = []
    seen: dict[tuple[str, int], SelectedPartition] = {}
    other_shards = 0
    for entry in entries:
        for topic, partition in _selected(entry, metadata, missing):
            destination = entry.destination_name(topic)
            check_loop(entries, entry, topic, destination)
            spec = MirrorSpec(
                name=entry.name if entry.single is not None else f"{entry.name}.{topic}-{partition}",
                entry=entry.index,
                cluster=entry.cluster,
                source=entry.source,
                source_field=entry.source_field,
                topic=topic,
                partition=partition,
                destination_name=destination,
                flush=entry.flush,
                start_at=entry.start_at,
                single=entry.single is not None,
                commit_group=(entry.source.group_id or f"mirror-v3.{entry.name}")
                if entry.source.commit_source_offsets
                else None,
                schemas=entry.schemas,
            )
            # Every shard checks every collision, so all of them refuse the same config.
            _claim(seen, (destination, partition), spec.selected)
            if shard is not None and not shard.owns(entry.cluster, topic, partition):
                other_shards += 1
                continue
            specs.append(spec)
    specs.sort(key=lambda s: s.key)
    return EstatePlan(tuple(specs), tuple(missing), other_shards)


def _selected(entry: Entry, metadata: Metadata, missing: list[MissingTopic]) -> Iterable[tuple[str, int]]:
    if entry.single is not None:
        yield entry.single
        return
    topics = metadata.get(entry.cluster)
    if topics is None:
        return
    for topic in entry.topics:
        if topic not in topics and not (entry.exclude is not None and entry.exclude.fullmatch(topic)):
            missing.append(MissingTopic(entry.field, entry.cluster, topic))
    for topic in sorted(topics):
        if not entry.selects(topic):
            continue
        count = topics[topic]
        wanted = range(count) if entry.partitions is None else sorted(p for p in entry.partitions if p < count)
        yield from ((topic, partition) for partition in wanted)


def needs_metadata(entries: Iterable[Entry]) -> set[str]:
    """The clusters whose metadata `expand` needs: those of selection entries."""
    return {entry.cluster for entry in entries if entry.single is None}
