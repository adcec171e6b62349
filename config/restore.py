"""The `restore` config: which archived chains go back into which Kafka topics, and how.

A restore reads what mirror-v3 wrote: `archive` is the filesystem or S3 block the mirror's `destination` was (the
same keys; only those that say where the chains are matter), and `destination` is a Kafka block as a mirror's. Each
`restore` entry selects archived names (the directory or key segment of each chain: the mirror's destination name)
and their partitions, optionally bounds the offsets, and may rename the destination topic.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Annotated, Any

import msgspec

from config.client_properties import LibraryCheck, client_properties_problem
from config.errors import ConfigError, FieldPath
from config.loader import (
    check_group_patterns,
    check_spark_master,
    line_of,
    parse_document,
    registry_problem,
    s3_bucket_problem,
    security_problem,
)
from config.model import (
    FilesystemDestination,
    GroupSelection,
    KafkaDestination,
    NonNegativeInt,
    S3Destination,
    SchemasConfig,
    SparkConfig,
    TopicName,
    _Strict,
)
from config.moments import parse_moment

_RENAMED = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]+$")

# A point in time: milliseconds since the Unix epoch, or an RFC 3339 time with its zone (2026-01-31T00:00:00Z).
Timestamp = NonNegativeInt | Annotated[datetime, msgspec.Meta(tz=True)]


class RestoreEntry(_Strict, frozen=True):
    """Archived chains to restore: exactly one of `topic`, `topics`, `topic-regex`."""

    topic: Annotated[TopicName | None, msgspec.Meta(description="One archived name.")] = None
    topics: Annotated[list[TopicName] | None, msgspec.Meta(description="Archived names.")] = None
    topic_regex: Annotated[
        str | None, msgspec.Meta(description="Every archived name this regular expression matches in full.")
    ] = None
    partitions: Annotated[
        list[NonNegativeInt] | None, msgspec.Meta(description="Only these partitions (default: every archived one).")
    ] = None
    rename: Annotated[
        str | None,
        msgspec.Meta(
            description="Destination topic instead of the archived name; `{topic}` stands for the archived name "
            "(e.g. restored-{topic})."
        ),
    ] = None
    from_offset: Annotated[
        NonNegativeInt | None, msgspec.Meta(description="First offset restored (default: the chain's first).")
    ] = None
    to_offset: Annotated[
        NonNegativeInt | None,
        msgspec.Meta(description="End of the restored range, exclusive (default: the chain's end)."),
    ] = None
    from_timestamp: Annotated[
        Timestamp | None,
        msgspec.Meta(
            description="Start at the first archived record stamped at or after this time (milliseconds since the "
            "epoch, or RFC 3339 with a zone), as Kafka's offsets-for-times finds it."
        ),
    ] = None
    to_timestamp: Annotated[
        Timestamp | None,
        msgspec.Meta(
            description="End before the first archived record stamped at or after this time. The range stays one "
            "run of offsets: records inside it are restored whatever their own timestamps."
        ),
    ] = None

    @property
    def from_timestamp_ms(self) -> int | None:
        return timestamp_ms(self.from_timestamp)

    @property
    def to_timestamp_ms(self) -> int | None:
        return timestamp_ms(self.to_timestamp)

    def destination_topic(self, archived: str) -> str:
        return archived if self.rename is None else self.rename.replace("{topic}", archived)


def timestamp_ms(value: int | datetime | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return int(value.timestamp() * 1000)


class RestoreConfig(_Strict, frozen=True):
    archive: Annotated[
        FilesystemDestination | S3Destination,
        msgspec.Meta(description="Where the chains are: the filesystem or s3 destination block that wrote them."),
    ]
    restore: Annotated[list[RestoreEntry], msgspec.Meta(min_length=1)]
    destination: KafkaDestination
    spark: SparkConfig = msgspec.field(default_factory=SparkConfig)
    as_of: Annotated[
        Timestamp | None,
        msgspec.Meta(
            description="Restore the archive as it was at this moment (milliseconds since the epoch, or RFC 3339 "
            "with a zone): each chain up to its last blob committed by then, the topic metadata and group positions "
            "last archived by then (`restore --as-of` sets it too)."
        ),
    ] = None
    schemas: Annotated[
        SchemasConfig | None,
        msgspec.Meta(
            description="Copy the schemas the archive kept (mirrored with `schemas`) into "
            "`destination.schema-registry` and give each restored key or value its ID there, strict or lenient as a "
            "mirror does."
        ),
    ] = None
    group_positions: Annotated[
        GroupSelection | None,
        msgspec.Meta(
            description="After the records, commit these consumer groups' archived positions (`archive-groups`) on "
            "the destination: preserve as archived, renumber translated to the first restored record at or after "
            "each; clipped to what was restored. A group with members on the destination is left alone."
        ),
    ] = None

    @property
    def as_of_ms(self) -> int | None:
        return timestamp_ms(self.as_of)


def parse_as_of(text: str) -> int:
    """`--as-of`: milliseconds since the epoch, or an RFC 3339 time with its zone; ConfigError otherwise."""
    return parse_moment(text, "--as-of")


def parse_restore_config(
    text: str, env: dict[str, str] | None = None, source: str = "<config>", library_check: LibraryCheck | None = None
) -> RestoreConfig:
    """Parse a restore config's YAML text; `library_check` as in config.loader.parse_config."""
    config, lines = parse_document(
        text, RestoreConfig, "`archive`, `restore` and `destination`", source=source, env=env
    )
    _check(config, lines, library_check)
    return config


def _check(config: RestoreConfig, lines: dict[FieldPath, int], library_check: LibraryCheck | None) -> None:
    def error(path: FieldPath, message: str) -> ConfigError:
        return ConfigError(path, message, line_of(lines, path))

    check_spark_master(config.spark.master, lines)
    archive = config.archive
    if isinstance(archive, S3Destination) and (bucket := s3_bucket_problem(archive.bucket)) is not None:
        raise error(("archive", "bucket"), bucket)
    if isinstance(archive, S3Destination) and (archive.access_key_id_env is None) != (
        archive.secret_access_key_env is None
    ):
        missing = "secret-access-key-env" if archive.secret_access_key_env is None else "access-key-id-env"
        raise error(("archive", missing), "set both access-key-id-env and secret-access-key-env, or neither")
    if config.group_positions is not None:
        check_group_patterns(("group-positions",), config.group_positions, error)
    registry = config.destination.schema_registry
    if config.schemas is not None and config.schemas.on and registry is None:
        raise error(("destination", "schema-registry"), "schemas are copied: give the destination's registry")
    if registry is not None and (wrong := registry_problem(registry)) is not None:
        raise error(("destination", "schema-registry", *wrong[0]), wrong[1])
    if config.destination.sync_groups is not None:
        raise error(("destination", "sync-groups"), "a restore has no source consumer groups to sync: remove it")
    problem = security_problem(config.destination.security)
    if problem is not None:
        raise error(("destination", "security", *problem[0]), problem[1])
    refused = client_properties_problem(config.destination.client_properties, "producer", library_check)
    if refused is not None:
        raise error(("destination", "client-properties", refused[0]), refused[1])
    for index, entry in enumerate(config.restore):
        path: FieldPath = ("restore", index)
        chosen = [
            key
            for key, value in (("topic", entry.topic), ("topics", entry.topics), ("topic-regex", entry.topic_regex))
            if value is not None
        ]
        if len(chosen) != 1:
            raise error(path, f"set exactly one of topic, topics, topic-regex (found {', '.join(chosen) or 'none'})")
        if entry.topic_regex is not None:
            try:
                re.compile(entry.topic_regex)
            except re.error as exc:
                raise error((*path, "topic-regex"), f"not a regular expression: {exc}") from None
        if entry.rename is not None:
            example = entry.rename.replace("{topic}", "t")
            if not _RENAMED.match(example) or len(example) > 249:
                raise error(
                    (*path, "rename"),
                    f"invalid topic {entry.rename!r}: use letters, digits, '.', '_', '-' and {{topic}}",
                )
            if "{topic}" not in entry.rename and entry.topic is None:
                raise error((*path, "rename"), "several topics would share one name: put {topic} in it")
        if entry.from_offset is not None and entry.to_offset is not None and entry.to_offset <= entry.from_offset:
            raise error((*path, "to-offset"), f"must be above from-offset {entry.from_offset}")
        since, until = entry.from_timestamp_ms, entry.to_timestamp_ms
        if since is not None and until is not None and until <= since:
            raise error((*path, "to-timestamp"), f"must be later than from-timestamp ({since} ms)")


def restore_schema() -> str:
    schema: dict[str, Any] = msgspec.json.schema(RestoreConfig)
    schema["$defs"]["RestoreEntry"]["oneOf"] = [
        {"required": ["topic"]},
        {"required": ["topics"]},
        {"required": ["topic-regex"]},
    ]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mirror-v3 restore configuration"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
