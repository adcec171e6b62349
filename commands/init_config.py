"""`init`: a commented starting config from what a user knows on day one (a bootstrap address, where the copies go,
which topics), which `validate` accepts and `plan` explains. Pure: the answers in, the YAML text out.

The destination is written as a user says it: a directory (`./mirror-data`, `/data/archive`, `file:///data`), an
S3 URL (`s3://bucket/prefix`) or another Kafka cluster (`kafka://host:9092[,host:9092]`). Every setting a first
run needs is written out; the ones a user most often adds next (security, flush limits, a table) are there as
comments, so that the file teaches its own format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from config.errors import ConfigError

SCHEMA_LINE = "# yaml-language-server: $schema=https://github.com/mirror-v3/mirror-v3/raw/main/schemas/mirror-v3.config.schema.json"
# Kafka's own topics and the usual internal ones: a selection of "everything" means the applications' topics.
DEFAULT_TOPICS = "[^_].*"


@dataclass(frozen=True)
class Destination:
    """Where the copies go, as `init --destination` was told: its kind and its place."""

    kind: str  # filesystem, s3 or kafka
    place: str  # the directory; bucket/prefix; the bootstrap list

    @staticmethod
    def parse(given: str) -> Destination:
        """`./dir`, `/dir`, `file:///dir`, `s3://bucket[/prefix]`, `kafka://host:port[,host:port]` (ConfigError
        naming --destination otherwise)."""
        scheme = urlsplit(given).scheme if "://" in given else ""
        if scheme in ("", "file"):
            place = given.removeprefix("file://") if scheme else given
            if not place:
                raise ConfigError(
                    "--destination", "is empty: give a directory, s3://bucket/prefix or kafka://host:port"
                )
            return Destination("filesystem", place)
        if scheme == "s3":
            bucket_and_prefix = given.removeprefix("s3://").strip("/")
            if not bucket_and_prefix:
                raise ConfigError("--destination", f"{given!r} names no bucket: s3://bucket/prefix")
            return Destination("s3", bucket_and_prefix)
        if scheme == "kafka":
            servers = given.removeprefix("kafka://").strip("/")
            if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", servers):
                raise ConfigError("--destination", f"{given!r}: expected kafka://host:port[,host:port]")
            return Destination("kafka", servers)
        raise ConfigError("--destination", f"{given!r}: expected a directory, s3://bucket/prefix or kafka://host:port")


def starting_config(bootstrap_servers: str, destination: Destination, topics: str = DEFAULT_TOPICS) -> str:
    """The commented YAML of a config that mirrors the topics `topics` matches (a regular expression, whole
    names) of the cluster at `bootstrap_servers` to `destination`."""
    if not re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)*", bootstrap_servers):
        raise ConfigError("--bootstrap-servers", f"{bootstrap_servers!r}: expected host:port[,host:port]")
    try:
        re.compile(topics)
    except re.error as exc:
        raise ConfigError("--topics", f"invalid regular expression {topics!r}: {exc}") from None
    return "\n".join(
        [
            SCHEMA_LINE,
            "# A starting config written by `mirror-v3 init`. Next:",
            "#   mirror-v3 validate --config <this file>   # offline: every problem of the file at once",
            "#   mirror-v3 plan --config <this file>       # asks the cluster: every partition it would mirror",
            "#   mirror-v3 run --config <this file>        # /metrics, /healthz, /readyz on port 7780",
            "#   mirror-v3 status --config <this file> --watch",
            "# Every key: docs/configuration.md (or the JSON schema above, which an editor reads as you type).",
            "",
            "clusters:",
            "  source:",
            f"    bootstrap-servers: {_scalar(bootstrap_servers)}",
            "    # security:                 # TLS and SASL (docs/configuration.md, Clusters); secrets come from",
            "    #   protocol: SASL_SSL      # environment variables, never from this file",
            "    #   sasl:",
            "    #     mechanism: SCRAM-SHA-512",
            "    #     username: mirror",
            "    #     password-env: SOURCE_KAFKA_PASSWORD",
            "",
            *_destination_lines(destination),
            "",
            "mirrors:",
            "  - name: all",
            "    cluster: source",
            f"    topic-regex: {_scalar(topics)}   # whole topic names; new matching topics are picked up",
            '    # exclude-regex: ".*-dlq"',
            "    # partitions: [0, 1]           # default: every partition",
            "",
        ]
    )


def _destination_lines(destination: Destination) -> list[str]:
    # An S3 archive's Iceberg table needs a catalog every process reaches; a filesystem's embeds a SQLite one.
    catalog = ['  #   catalog: {type: rest, properties: {uri: "https://iceberg-catalog:8181"}}']
    if destination.kind == "kafka":
        return [
            "destination:",
            "  type: kafka",
            f"  bootstrap-servers: {_scalar(destination.place)}",
            "  offsets: renumber     # preserve: the source's offsets (empty topics, a source without holes)",
            "  create-topics: true   # missing topics made with the source's partitions and configs, kept in step",
            '  # sync-groups: {groups: [".*"]}   # move consumer groups\' positions with the data (failover)',
        ]
    blob = [
        "  # flush:",
        "  #   max-time-ms: 60000   # a blob per partition at least this often while records arrive",
        "  # table:                 # the archive as an Iceberg (or Delta) table engines open by name",
        "  #   format: iceberg",
        "  #   name: archive.{topic}",
        *(catalog if destination.kind == "s3" else []),
        "  # compaction: {interval-ms: 600000}   # merge small blobs in the background",
        "  # retention: {keep-ms: 2592000000}     # keep 30 days",
    ]
    if destination.kind == "s3":
        bucket, _, prefix = destination.place.partition("/")
        return [
            "destination:",
            "  type: s3",
            f"  bucket: {_scalar(bucket)}",
            *([f"  prefix: {_scalar(prefix)}"] if prefix else []),
            "  # region: eu-west-1",
            "  # endpoint: http://minio:9000   # an S3-compatible store (with path-style: true)",
            "  # Credentials: the AWS default chain (environment, profile, instance or pod role).",
            *blob,
        ]
    return ["destination:", "  type: filesystem", f"  root: {_scalar(destination.place)}", *blob]


def _scalar(text: str) -> str:
    """`text` as one YAML scalar: plain where YAML reads it back as the same string, else double-quoted."""
    import json

    import yaml

    try:
        plain = yaml.safe_load(f"k: {text}")
    except yaml.YAMLError:
        plain = None
    return text if isinstance(plain, dict) and plain.get("k") == text and "#" not in text else json.dumps(text)
