"""The configuration schema. Keys are kebab-case in YAML; unknown keys are rejected everywhere.

The JSON Schema in `schemas/mirror-v3.config.schema.json` is generated from these structs
(`python -m tools.generated`), so every constraint written here is also what editors see.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
MirrorName = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=200,
        description="Names the mirror in logs and errors; letters, digits, '.', '_' and '-'.",
    ),
]
# Kafka's legal topic characters; Kafka also refuses "." and "..". A topic (or its override) becomes a
# directory or key segment, so it must not be able to climb out of the destination root either.
# Not "." or "..": spelt without a lookahead, so that every JSON Schema engine (Helm's, in Go, has none) reads it.
_PATH_SEGMENT = r"^([A-Za-z0-9_-][A-Za-z0-9._-]*|\.[A-Za-z0-9_-][A-Za-z0-9._-]*|\.\.[A-Za-z0-9._-]+)$"
TopicName = Annotated[
    str,
    msgspec.Meta(
        pattern=_PATH_SEGMENT,
        max_length=249,
        description="Source topic; also the destination topic, directory or key segment unless overridden.",
    ),
]
DestinationName = Annotated[
    str,
    msgspec.Meta(
        pattern=_PATH_SEGMENT,
        max_length=249,
        description="Destination topic (kafka) or directory / key segment (filesystem, s3) used instead of the "
        "source topic name.",
    ),
]
NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
ClientProperties = Annotated[
    dict[str, str | int | bool],
    msgspec.Meta(
        description="librdkafka properties passed as they are to this cluster's librdkafka clients (the Spark "
        "tasks' consumers and producers, the admin client), e.g. fetch.max.bytes, client.dns.lookup, "
        "socket.keepalive.enable; not to the driver's aiokafka clients. Keys mirror-v3 owns (offsets, isolation, "
        "group handling, the producer's guarantees, security, bootstrap) are refused, as are names and values "
        "librdkafka refuses."
    ),
]


class _Strict(msgspec.Struct, rename="kebab", forbid_unknown_fields=True, frozen=True):
    """Base for every config struct: kebab-case keys, unknown keys are errors."""


class FlushConfig(_Strict, frozen=True):
    """When readable records become destination files, and how large the files are: whichever limit trips
    first. Records wait in the source (Kafka is the buffer), not in the mirror's memory."""

    max_time_ms: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Longest a record waits, from when it became readable on the source (as far as the "
            "mirror's offset queries tell) until its flush starts, in ms; a read that takes longer delays it.",
        ),
    ] = 10_000
    max_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Record bytes (keys, values and headers) per destination file: a flush is due once this "
            "much is readable, each blob holds at most this much, and a larger record is a blob of its own.",
        ),
    ] = 128 * 1024 * 1024
    max_offsets: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Source offsets (records and holes) per destination file: a flush is due once this many "
            "are readable, and no blob spans more.",
        ),
    ] = 1_000_000
    daily: Annotated[
        bool,
        msgspec.Meta(
            description="Files and objects only: a blob never holds records of two UTC days (by record timestamp), "
            "so an archive can be pruned and queried by day; a blob closed at midnight is logged with trigger=daily."
        ),
    ] = False


class RetryConfig(_Strict, frozen=True):
    """Retries of transient destination failures (5xx, throttling, timeouts, connection resets)."""

    initial_backoff_ms: Annotated[int, msgspec.Meta(ge=1, description="Delay before the first retry.")] = 200
    max_backoff_ms: Annotated[int, msgspec.Meta(ge=1, description="Longest delay between two attempts.")] = 10_000
    deadline_ms: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="How long one write keeps being retried before the mirror fails (and the process "
            "exits for the orchestrator to restart it).",
        ),
    ] = 300_000


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class OAuthClientCredentials(_Strict, tag_field="method", tag="client-credentials", frozen=True, kw_only=True):
    """OAuth 2 client-credentials grant: every client fetches its token from the identity provider's token endpoint
    (HTTP basic authentication with the client id and secret) and fetches a new one before it expires."""

    token_endpoint_url: Annotated[
        str, msgspec.Meta(pattern=r"^https?://", description="The identity provider's token endpoint.")
    ]
    client_id: Annotated[NonEmptyStr, msgspec.Meta(description="OAuth client id.")]
    client_secret_env: Annotated[
        str,
        msgspec.Meta(
            pattern=_ENV_NAME,
            description="Environment variable holding the client secret (never logged or printed).",
        ),
    ]
    scope: Annotated[
        NonEmptyStr | None, msgspec.Meta(description="Scope requested with the token (space-separated).")
    ] = None
    extensions: Annotated[
        dict[str, str],
        msgspec.Meta(
            description="SASL extensions sent with the token (RFC 7628), e.g. Confluent Cloud's logicalCluster and "
            "identityPoolId; keys are letters only."
        ),
    ] = msgspec.field(default_factory=dict)

    def __hash__(self) -> int:
        # A security block is a cache key of the driver's clients; the extensions dict alone is not hashable.
        return hash(msgspec.json.encode(self))


class OAuthUnsecuredJwt(_Strict, tag_field="method", tag="unsecured-jwt", frozen=True, kw_only=True):
    """An unsigned JWT (alg none) naming a principal, for brokers running Kafka's unsecured validator: development
    and test clusters only, never production."""

    principal: Annotated[NonEmptyStr, msgspec.Meta(description="The token's sub claim: who the broker sees.")]
    scope: Annotated[NonEmptyStr | None, msgspec.Meta(description="The token's scope claim (space-separated).")] = None
    lifetime_ms: Annotated[
        int, msgspec.Meta(ge=10_000, description="How long each token is valid; clients make a new one before.")
    ] = 3_600_000


class OAuthAwsMskIam(_Strict, tag_field="method", tag="aws-msk-iam", frozen=True, kw_only=True):
    """Amazon MSK IAM access control (SASL_SSL, port 9098): tokens signed by AWS's aws-msk-iam-sasl-signer library
    with the standard AWS credential chain (environment, IRSA web identity, instance profile), a profile, or a role
    assumed for the purpose."""

    region: Annotated[NonEmptyStr, msgspec.Meta(description="AWS region of the MSK cluster, e.g. eu-west-1.")]
    role_arn: Annotated[
        str | None, msgspec.Meta(description="IAM role to assume for the tokens (STS AssumeRole); else the chain's.")
    ] = None
    role_session_name: Annotated[
        NonEmptyStr | None, msgspec.Meta(description="Session name of the assumed role (with role-arn).")
    ] = None
    profile: Annotated[
        NonEmptyStr | None, msgspec.Meta(description="Named profile of the AWS config files (not with role-arn).")
    ] = None


OAuthBearerConfig = OAuthClientCredentials | OAuthUnsecuredJwt | OAuthAwsMskIam


class SaslConfig(_Strict, frozen=True):
    """SASL authentication: PLAIN and SCRAM with a user name and a password read from the environment variable
    named here; OAUTHBEARER with tokens from the `oauthbearer` block."""

    mechanism: Annotated[
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], msgspec.Meta(description="SASL mechanism.")
    ]
    username: Annotated[NonEmptyStr | None, msgspec.Meta(description="PLAIN and SCRAM: the SASL user name.")] = None
    password_env: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=_ENV_NAME,
                description="PLAIN and SCRAM: environment variable holding the password (never logged or printed).",
            ),
        ]
        | None
    ) = None
    oauthbearer: Annotated[
        OAuthBearerConfig | None,
        msgspec.Meta(
            description="OAUTHBEARER: where tokens come from (`method`: client-credentials, unsecured-jwt, "
            "aws-msk-iam)."
        ),
    ] = None


class TlsConfig(_Strict, frozen=True):
    """TLS towards the brokers. Files are PEM; the client key must be PKCS#8 ("BEGIN PRIVATE KEY" or
    "BEGIN ENCRYPTED PRIVATE KEY"), which both the Python and the JVM (Spark) clients read."""

    ca_file: Annotated[
        str | None, msgspec.Meta(description="CA bundle signing the brokers' certificates; system store when omitted.")
    ] = None
    cert_file: Annotated[str | None, msgspec.Meta(description="Client certificate chain (mutual TLS).")] = None
    key_file: Annotated[str | None, msgspec.Meta(description="Client private key (mutual TLS), PKCS#8 PEM.")] = None
    key_password_env: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=_ENV_NAME, description="Environment variable holding the password of an encrypted key-file."
            ),
        ]
        | None
    ) = None
    check_hostname: Annotated[
        bool, msgspec.Meta(description="Verify that the broker certificate names the host connected to.")
    ] = True


class KafkaSecurity(_Strict, frozen=True):
    """How clients authenticate to a Kafka cluster; the same settings reach every client of it
    (offset queries, Spark's reader, the destination producer)."""

    protocol: Annotated[
        Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        msgspec.Meta(
            description="Kafka security.protocol: SASL_* needs a sasl block; tls applies to SSL and SASL_SSL."
        ),
    ] = "PLAINTEXT"
    sasl: SaslConfig | None = None
    tls: TlsConfig | None = None


class SchemaRegistryConfig(_Strict, frozen=True):
    """A schema registry with the Confluent REST API (Confluent Schema Registry, Apicurio's ccompat API, Karapace,
    Redpanda): where the schemas of a cluster's records are."""

    url: Annotated[
        NonEmptyStr,
        msgspec.Meta(
            description="The API's base URL, http:// or https://, e.g. http://registry:8081 (Apicurio: "
            "http://host:8080/apis/ccompat/v7).",
        ),
    ]
    username: Annotated[NonEmptyStr | None, msgspec.Meta(description="Basic authentication: the user.")] = None
    password_env: (
        Annotated[
            str,
            msgspec.Meta(pattern=_ENV_NAME, description="Basic authentication: variable holding the password."),
        ]
        | None
    ) = None
    bearer_token_env: (
        Annotated[
            str,
            msgspec.Meta(pattern=_ENV_NAME, description="Bearer authentication: variable holding the token."),
        ]
        | None
    ) = None
    tls: Annotated[TlsConfig | None, msgspec.Meta(description="https: CA, client certificate and key.")] = None
    request_timeout_ms: Annotated[int, msgspec.Meta(ge=100, description="Timeout of each request.")] = 30_000


SchemaMode = Literal["off", "strict", "lenient"]


class SchemasConfig(_Strict, frozen=True):
    """Schema-registry mirroring of an entry's records (Kafka destinations, and `restore`): each key or value in the
    registry's wire format gets the destination registry's ID of its schema, the subject copied there first. strict:
    the destination subject is an exact copy of the source subject (else the mirror stops, naming the subject and
    version); lenient: every source version is there in the same relative order, other versions allowed. An archive
    (filesystem, S3) keeps the schemas instead, whichever mode is set, so that a restore can copy them."""

    key: Annotated[SchemaMode, msgspec.Meta(description="Record keys: off (copied as they are), strict, lenient.")] = (
        "off"
    )
    value: Annotated[SchemaMode, msgspec.Meta(description="Record values: off, strict, lenient.")] = "off"
    subject_name_strategy: Annotated[
        Literal["topic", "record", "topic-record"],
        msgspec.Meta(
            description="How the producers name subjects: topic (<topic>-key, <topic>-value), record (the record's "
            "full name), topic-record (<topic>-<record name>); a renamed destination topic renames its subjects."
        ),
    ] = "topic"

    @property
    def on(self) -> bool:
        return self.key != "off" or self.value != "off"


class CompactionConfig(_Strict, frozen=True):
    """How runs of a chain's small blobs are merged into bigger ones (`compact`): every reader sees the same records
    before, during and after, and after a crash at any point."""

    target_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="File bytes a merged blob grows to at most; a blob this big already is left as it is.",
        ),
    ] = 128 * 1024 * 1024
    min_age_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Only blobs committed at least this long ago are merged (the chain's last blob never is).",
        ),
    ] = 3_600_000
    window_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="A merged blob holds the blobs committed within one window of UTC time (an hour by default), "
            "merged once the whole window is older than min-age-ms: one blob per window per partition (more when "
            "a window holds over target-bytes), each byte rewritten once. 0: no window (runs of any age, a merged "
            "blob merged again with what followed it).",
        ),
    ] = 3_600_000
    interval_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="The running mirror merges its own chains' runs this often, in the background, one merge at "
            "a time (a Spark task: at most one core) and at most max-bytes-per-interval per round. 0: only the "
            "`compact` command merges.",
        ),
    ] = 0
    max_bytes_per_interval: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="The running mirror's compaction reads at most this many blob bytes per interval (its I/O "
            "budget); the rest waits for the next round.",
        ),
    ] = 1024 * 1024 * 1024


class RetentionConfig(_Strict, frozen=True):
    """How long the running mirror keeps what its chains committed (`prune` in the background): each chain's oldest
    contiguous blobs committed before now minus `keep-ms` go, never its last blob, and so do the documents no kept
    moment reads; `restore --as-of` then serves the cut and later."""

    keep_ms: Annotated[
        int,
        msgspec.Meta(
            ge=60_000, description="What was committed within this many milliseconds is kept (30 days: 2592000000)."
        ),
    ]
    interval_ms: Annotated[
        int, msgspec.Meta(ge=1_000, description="How often the running mirror prunes its own chains.")
    ] = 3_600_000


class _BlobDestination(_Strict, frozen=True, kw_only=True):
    """What filesystem and S3 destinations share: Parquet blobs, flush policy, retries."""

    flush: FlushConfig = msgspec.field(default_factory=FlushConfig)
    compression: Annotated[
        Literal["zstd", "snappy", "gzip", "lz4", "none"], msgspec.Meta(description="Parquet compression codec.")
    ] = "zstd"
    compression_level: Annotated[
        int | None,
        msgspec.Meta(
            description="Codec level: zstd -131072..22 (higher = smaller, slower), gzip 1-9, lz4 1-12; "
            "snappy and none take no level. Codec default when omitted."
        ),
    ] = None
    retry: RetryConfig = msgspec.field(default_factory=RetryConfig)
    topic_metadata_interval_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="How often each archived topic's partition count, replication factor, topic ID and the "
            "configs set on it are read from its source cluster; when they differ from the archive's newest record, "
            "a new one is added beside the topic's chains (`<dest-name>/_topic/<ms>.json`). Read at once when a "
            "topic's mirrors start. 0: never.",
        ),
    ] = 60_000
    archive_groups: Annotated[
        ArchiveGroupsConfig | None,
        msgspec.Meta(description="Keep the committed offsets of these source consumer groups in the archive."),
    ] = None
    table: Annotated[
        TableConfig | None,
        msgspec.Meta(description="Keep the archive as a table too (Iceberg), following the chains."),
    ] = None
    compaction: CompactionConfig = msgspec.field(default_factory=CompactionConfig)
    retention: Annotated[
        RetentionConfig | None,
        msgspec.Meta(description="The running mirror prunes its chains to what was committed within keep-ms."),
    ] = None


class FilesystemDestination(_BlobDestination, tag_field="type", tag="filesystem", frozen=True, kw_only=True):
    """Immutable Parquet files under `<root>/<dest-name>/<partition>/`."""

    root: Annotated[
        NonEmptyStr,
        msgspec.Meta(description="Directory holding the chains; relative paths resolve against the working directory."),
    ]


MiB = 1024 * 1024


class S3Destination(_BlobDestination, tag_field="type", tag="s3", frozen=True, kw_only=True):
    """The same Parquet blobs as objects under `s3://<bucket>/<prefix>/<dest-name>/<partition>/`."""

    bucket: Annotated[NonEmptyStr, msgspec.Meta(max_length=255, description="Bucket holding the chains; must exist.")]
    prefix: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^([^/].*[^/]|[^/])?$",
            description="Key prefix under which the chains live, without leading or trailing '/'.",
        ),
    ] = ""
    region: Annotated[str | None, msgspec.Meta(description="AWS region; from the AWS environment when omitted.")] = None
    endpoint: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=r"^https?://",
                description="S3 API endpoint URL (MinIO, SeaweedFS, Ceph RGW, ...); omit for AWS.",
            ),
        ]
        | None
    ) = None
    path_style: Annotated[
        bool, msgspec.Meta(description="Address buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>.")
    ] = False
    access_key_id_env: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=_ENV_NAME,
                description="Environment variable holding the access key id; standard AWS chain when omitted.",
            ),
        ]
        | None
    ) = None
    secret_access_key_env: (
        Annotated[
            str, msgspec.Meta(pattern=_ENV_NAME, description="Environment variable holding the secret access key.")
        ]
        | None
    ) = None
    session_token_env: (
        Annotated[str, msgspec.Meta(pattern=_ENV_NAME, description="Environment variable holding a session token.")]
        | None
    ) = None
    part_size_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=5 * MiB,
            le=5 * 1024 * MiB,
            description="Part size of the multipart upload each blob is staged as (Spark tasks upload the parts; "
            "the driver completes the upload with If-None-Match: *).",
        ),
    ] = 16 * MiB
    request_timeout_ms: Annotated[
        int, msgspec.Meta(ge=100, description="Upper bound of one S3 request, upload included.")
    ] = 60_000
    server_side_encryption: Annotated[
        Literal["AES256", "aws:kms"] | None,
        msgspec.Meta(
            description="Server-side encryption of every object written (blobs and claims): AES256 (SSE-S3) or "
            "aws:kms (SSE-KMS). The bucket's default encryption when omitted."
        ),
    ] = None
    sse_kms_key_id: Annotated[
        NonEmptyStr | None,
        msgspec.Meta(
            description="With server-side-encryption aws:kms: the KMS key (id, ARN or alias) that encrypts the "
            "objects; the account's aws/s3 key when omitted. The writer needs kms:GenerateDataKey on it, every "
            "reader (verify, restore) kms:Decrypt."
        ),
    ] = None
    storage_class: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=r"^[A-Z][A-Z0-9_]*$",
                description="Storage class of every object written, e.g. STANDARD_IA, INTELLIGENT_TIERING, GLACIER_IR. "
                "GLACIER and DEEP_ARCHIVE are refused: their objects cannot be read back (verify, restore) without a "
                "restore request; move old blobs there with a lifecycle rule instead. The bucket's default when "
                "omitted.",
            ),
        ]
        | None
    ) = None


# What `create-topics` copies by default: what a topic's data and its consumers depend on, never placement
# (replicas, min.insync.replicas) that the destination cluster decides for itself.
DEFAULT_TOPIC_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "min.compaction.lag.ms",
    "message.timestamp.type",
    "compression.type",
    "segment.ms",
)


class GroupSelection(_Strict, frozen=True):
    """Consumer groups by name: those one of `groups` matches in full and none of `groups-exclude` does."""

    groups: Annotated[
        list[NonEmptyStr],
        msgspec.Meta(min_length=1, description="Regular expressions: a group is selected if one matches in full."),
    ]
    groups_exclude: Annotated[
        list[NonEmptyStr],
        msgspec.Meta(description="Regular expressions: a group one of them matches in full is never selected."),
    ] = msgspec.field(default_factory=list)

    def selects(self, group: str) -> bool:
        return any(re.fullmatch(p, group) for p in self.groups) and not any(
            re.fullmatch(p, group) for p in self.groups_exclude
        )


class GroupSyncConfig(GroupSelection, frozen=True):
    """Consumer-group offset sync: source groups' committed offsets of mirrored partitions written to the same
    groups on the destination, so consumers can move there."""

    interval_ms: Annotated[int, msgspec.Meta(ge=100, description="How often the offsets are synced.")] = 10_000


class ArchiveGroupsConfig(GroupSelection, frozen=True):
    """Consumer-group positions kept in a blob archive: the committed offsets of the selected source groups on
    the archived partitions, read every `interval-ms` and added when they changed (`_groups/<cluster>/<ms>.json`)."""

    interval_ms: Annotated[
        int, msgspec.Meta(ge=1000, description="How often the positions are read (one request per group).")
    ] = 60_000


class TableCatalogConfig(_Strict, frozen=True):
    """Where an archive's Iceberg tables are registered: any catalog PyIceberg loads from its properties."""

    type: Annotated[
        Literal["sql", "rest", "glue", "hive"],
        msgspec.Meta(description="PyIceberg catalog type: sql (a database: SQLite file or server), rest, glue, hive."),
    ] = "sql"
    properties: Annotated[
        dict[str, str],
        msgspec.Meta(
            description="PyIceberg catalog properties (`uri`, `warehouse`, ...). A filesystem archive's default: a "
            "SQLite catalog at `<root>/_catalog/iceberg.db` with the tables' metadata under `<root>/_iceberg`."
        ),
    ] = msgspec.field(default_factory=dict)
    properties_env: Annotated[
        dict[str, str],
        msgspec.Meta(
            description="Catalog properties whose values are secrets: property name → the environment variable "
            "holding its value (`credential: ICEBERG_CREDENTIAL`)."
        ),
    ] = msgspec.field(default_factory=dict)


class TableConfig(_Strict, frozen=True):
    """The archive as a table engines open by name: each committed blob added once, in offset order, by the mirror
    that wrote it (no coordinator)."""

    format: Annotated[
        Literal["iceberg", "delta"],
        msgspec.Meta(
            description="Table format. iceberg: a table per `name` in `catalog`. delta: a table per chain name, at "
            "the chains' own directory `<root>/<dest-name>` (on S3: its log written with conditional puts)."
        ),
    ]
    name: Annotated[
        NonEmptyStr,
        msgspec.Meta(
            description="The table of each archived topic: a template with `{topic}` (the source topic) and "
            "`{dest}` (its chains' name), `namespace.table` (delta: the name in the table's metadata)."
        ),
    ] = "mirror_v3.{dest}"
    commit_interval_ms: Annotated[
        int,
        msgspec.Meta(
            ge=1000,
            description="One commit per table per interval carries every blob committed since, of every partition.",
        ),
    ] = 60_000
    keep_snapshots_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="Iceberg: how long a table keeps its snapshots (its time travel). Each commit removes older "
            "ones from the table's metadata (no file is deleted), except what reading the chains' positions needs; "
            "engines' own expiry refuses these tables (gc.enabled=false). 0: every snapshot is kept, and the "
            "metadata every commit rewrites grows by a commit's positions per interval.",
        ),
    ] = 3_600_000
    catalog: TableCatalogConfig | None = None


class KafkaDestination(_Strict, tag_field="type", tag="kafka", frozen=True, kw_only=True):
    """Another Kafka cluster: records go to the same partition number of `<dest-name>`, which must
    exist with enough partitions."""

    bootstrap_servers: Annotated[NonEmptyStr, msgspec.Meta(description="host:port[,host:port...]")]
    security: KafkaSecurity = msgspec.field(default_factory=KafkaSecurity)
    offsets: Annotated[
        Literal["preserve", "renumber"],
        msgspec.Meta(
            description="preserve: destination offset = source offset (the destination partition must end "
            "where the mirror continues; a source hole stops the mirror). renumber: records get new offsets, "
            "each carries header mirror-v3.source-offset, and every flush is one transaction that also "
            "commits the source position to a consumer group on the destination (holes are fine)."
        ),
    ] = "preserve"
    flush: FlushConfig = msgspec.field(
        default_factory=lambda: FlushConfig(max_time_ms=1_000, max_bytes=32 * MiB, max_offsets=500_000)
    )
    compression: Annotated[
        Literal["none", "gzip", "snappy", "lz4", "zstd"],
        msgspec.Meta(description="Record-batch compression of the producer."),
    ] = "none"
    max_batch_bytes: Annotated[
        int,
        msgspec.Meta(
            ge=1024,
            description="Largest record batch sent in one produce request; keep it at or below the destination "
            "topic's max.message.bytes (1 MiB by default).",
        ),
    ] = 1_000_000
    transaction_id_prefix: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[A-Za-z0-9._-]+$",
            max_length=200,
            description="renumber: transactional.id = <prefix>.<dest-name>.<partition> (a newer process fences an "
            "older one) and the position is committed for consumer group <prefix>.<dest-name>.",
        ),
    ] = "mirror-v3"
    request_timeout_ms: Annotated[
        int, msgspec.Meta(ge=100, description="Timeout of one request to the destination cluster.")
    ] = 30_000
    client_properties: ClientProperties = msgspec.field(default_factory=dict)
    retry: RetryConfig = msgspec.field(default_factory=RetryConfig)
    create_topics: Annotated[
        bool,
        msgspec.Meta(
            description="Create a missing destination topic with the source topic's partition count and its "
            "`topic-configs`, add partitions the source gains while running before they are mirrored, and keep "
            "the `topic-configs` in sync (`sync-topic-configs-interval-ms`)."
        ),
    ] = False
    replication_factor: Annotated[
        int,
        msgspec.Meta(
            ge=-1,
            le=32767,
            description="create-topics: replication factor of created topics (-1: the broker's "
            "default.replication.factor).",
        ),
    ] = -1
    topic_configs: Annotated[
        list[NonEmptyStr],
        msgspec.Meta(
            description="create-topics: the topic configs copied from the source topic (those it sets itself; "
            "broker defaults are not copied) and kept in sync."
        ),
    ] = msgspec.field(default_factory=lambda: list(DEFAULT_TOPIC_CONFIGS))
    sync_topic_configs_interval_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="create-topics: how often `topic-configs` are synced from the source (0: only on creation).",
        ),
    ] = 60_000
    schema_registry: Annotated[
        SchemaRegistryConfig | None,
        msgspec.Meta(description="The destination cluster's schema registry (entries with `schemas`)."),
    ] = None
    sync_groups: Annotated[
        GroupSyncConfig | None,
        msgspec.Meta(
            description="Consumer-group offset sync (off when absent): preserve writes a group's source offset "
            "unchanged, renumber the destination offset of the first record at or above it; never beyond what the "
            "destination durably holds, never for a group with members on the destination or already ahead there."
        ),
    ] = None
    add_partitions: Annotated[
        bool,
        msgspec.Meta(
            description="create-topics: also add partitions to a destination topic found at start with fewer "
            "partitions than its source (otherwise that is reported, and the mirrors of the missing partitions fail)."
        ),
    ] = False


Destination = FilesystemDestination | S3Destination | KafkaDestination


class SourceConfig(_Strict, frozen=True):
    """The Kafka cluster a mirror reads from."""

    bootstrap_servers: Annotated[NonEmptyStr, msgspec.Meta(description="host:port[,host:port...]")]
    security: KafkaSecurity = msgspec.field(default_factory=KafkaSecurity)
    group_id: Annotated[
        str | None,
        msgspec.Meta(
            description="Consumer group id used by the readers (never committed to; restart position "
            "comes from the destination). Default: mirror-v3.<mirror name>."
        ),
    ] = None
    isolation_level: Annotated[
        Literal["read_committed", "read_uncommitted"],
        msgspec.Meta(
            description="read_committed reads up to the last stable offset and skips aborted records; "
            "read_uncommitted copies every record up to the high watermark."
        ),
    ] = "read_committed"
    on_data_loss: Annotated[
        Literal["fail", "skip"],
        msgspec.Meta(
            description="What to do when records the destination still needs were deleted at the source "
            "(retention, DeleteRecords): fail naming the offsets, or skip to the log start offset."
        ),
    ] = "fail"
    poll_interval_ms: Annotated[
        int,
        msgspec.Meta(
            ge=10,
            description="How often the offsets of the mirrored partitions are polled for new records (one "
            "request per broker for all of a cluster's partitions, at the smallest interval of its mirrors).",
        ),
    ] = 500
    request_timeout_ms: Annotated[
        int, msgspec.Meta(ge=100, description="Timeout for offset queries against the source.")
    ] = 30_000
    outage_deadline_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0,
            description="How long a mirror rides out a source that does not answer (a broker restart): offset and "
            "metadata queries, and reads given up after source.read-stall-timeout-ms, are asked again with backoff "
            "until the source has been unreachable this long; then the mirror fails. 0 fails at the first "
            "unanswered query.",
        ),
    ] = 60_000
    read_stall_timeout_ms: Annotated[
        int,
        msgspec.Meta(
            ge=100,
            description="A read of the source that receives nothing (no record, no move of its position) for this "
            "long (or at once, when the client reports every broker of the cluster down) is given up and asked again "
            "by its mirror, alone, with backoff (within source.outage-deadline-ms): "
            "a broker that dies or stops answering while a Spark job reads it holds the other partitions of that job "
            "at most about this long. (A Kafka preserve-mode backlog read, which cannot be given up midway, waits up "
            "to the outage deadline instead.)",
        ),
    ] = 5_000
    commit_source_offsets: Annotated[
        bool,
        msgspec.Meta(
            description="Commit each mirror's durable position to a consumer group on this cluster after its commits "
            "(coalesced to about one request per second), so consumer-group lag tools (Burrow, kafka_exporter, "
            "kafka-lag-exporter) show mirror-v3. Informational only: restarts still read the destination. The group "
            "is group-id, else mirror-v3.<entry name>; it must have no members."
        ),
    ] = False
    transaction_hold_alert_ms: Annotated[
        int,
        msgspec.Meta(
            ge=1000,
            description="read_committed: how long a mirror may wait at the last stable offset for an open "
            "transaction before it logs a WARN (and the TransactionHeld alert fires). A producer that never "
            "ends its transaction otherwise looks like a caught-up mirror.",
        ),
    ] = 300_000
    schema_registry: Annotated[
        SchemaRegistryConfig | None,
        msgspec.Meta(description="This cluster's schema registry (entries with `schemas`)."),
    ] = None
    client_properties: ClientProperties = msgspec.field(default_factory=dict)


class SparkConfig(_Strict, frozen=True):
    """The Spark data plane shared by all mirrors of the process."""

    master: Annotated[NonEmptyStr, msgspec.Meta(description="spark.master, e.g. local[*] or spark://host:7077.")] = (
        "local[*]"
    )
    max_offsets_per_job: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Largest offset range one flush's Spark job covers (at least one blob per core); a longer "
            "backlog is written by several jobs, each committed before the next starts.",
        ),
    ] = 2_000_000
    max_bytes_per_job: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="Record bytes one Spark job covers at most (at least one blob per core), sized from the "
            "bytes per offset seen so far: a backlog's flush, and the small flushes of many partitions that share "
            "one job. For the Kafka destination a partition's range in a job is one transaction (renumber).",
        ),
    ] = 256 * 1024 * 1024
    offsets_per_task: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="A Spark task covers at most about this many offsets (rounded to whole blobs), so a "
            "backlog is spread over every core and tasks of other mirrors get their turn.",
        ),
    ] = 500_000
    bytes_per_task: Annotated[
        int,
        msgspec.Meta(
            ge=1,
            description="A Spark task covers at most about this many record bytes (whole blobs). A flush of one "
            "write of at most 8 MiB and 62 500 offsets (and a task) shares a Spark job with the other "
            "partitions' flushes that fall due at the same time; a larger one runs as a job of its own.",
        ),
    ] = 64 * 1024 * 1024
    driver_memory: Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[0-9]+[kmgt]?$",
            description="Largest JVM heap of the Spark driver (spark.driver.memory), e.g. 2g. No destination's "
            "records pass through the driver: its heap holds Spark's bookkeeping (and, in local mode, its executor's).",
        ),
    ] = "2g"
    log_level: Annotated[
        Literal["ERROR", "WARN", "INFO", "DEBUG"],
        msgspec.Meta(description="Log level of Spark's JVM (its own output)."),
    ] = "ERROR"
    conf: Annotated[
        dict[str, str],
        msgspec.Meta(description="Extra Spark configuration, passed to the SparkSession builder as is."),
    ] = msgspec.field(default_factory=dict)


ClusterName = Annotated[
    str,
    msgspec.Meta(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=100,
        description="Names a source cluster in `clusters`; also the `cluster` label of metrics and log lines.",
    ),
]
# A prefix or suffix of a destination name: the characters of a Kafka topic name, possibly none.
_NAME_PART = r"^[A-Za-z0-9._-]*$"


class DestinationNameRule(_Strict, frozen=True):
    """How a selected source topic's name becomes its destination name (Kafka topic, or directory / key
    segment): `regex` is replaced by `replacement` wherever it matches (Python `re.sub`; `\\1` and `\\g<name>`
    refer to groups), then `prefix` and `suffix` are added. Identity when nothing is set."""

    prefix: Annotated[str, msgspec.Meta(pattern=_NAME_PART, max_length=200, description="Put before the name.")] = ""
    suffix: Annotated[str, msgspec.Meta(pattern=_NAME_PART, max_length=200, description="Put after the name.")] = ""
    regex: Annotated[
        NonEmptyStr | None, msgspec.Meta(description="Python regular expression searched in the topic name.")
    ] = None
    replacement: Annotated[
        str | None, msgspec.Meta(description="What each match of `regex` becomes; required with `regex`.")
    ] = None


class MirrorDefaults(_Strict, frozen=True):
    """Settings every entry of `mirrors` inherits unless it sets its own."""

    flush: Annotated[
        FlushConfig | None,
        msgspec.Meta(description="Flush policy of every mirror; the destination's `flush` when omitted."),
    ] = None
    destination_name: Annotated[
        DestinationNameRule | None,
        msgspec.Meta(
            description="Destination name rule of every entry that has none of its own; identity when omitted."
        ),
    ] = None
    start_at: Annotated[
        str | None,
        msgspec.Meta(
            description="Where a mirror whose destination is empty begins: earliest (the source's log start), latest "
            "(the source's end when the mirror starts), or an ISO 8601 time with a zone such as 2026-11-01T00:00:00Z "
            "(the first offset whose timestamp is at or after it). Ignored once the destination holds data. Until "
            "its first flush lands, a restarted mirror decides again. Default earliest."
        ),
    ] = None


class DiscoveryConfig(_Strict, frozen=True):
    """Live discovery: selections (`topics`, `topic-regex`, `partitions: all`) are matched against the
    source clusters' metadata again while the process runs, so new topics and partitions are mirrored
    without a restart."""

    interval_ms: Annotated[
        int, msgspec.Meta(ge=1_000, description="How often each source cluster's topics and partitions are re-read.")
    ] = 30_000


PartitionList = Annotated[
    list[Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]],
    msgspec.Meta(min_length=1, description="Source partition numbers."),
]


class MirrorConfig(_Strict, frozen=True):
    """One entry: either one source (topic, partition), or a selection of topics (`topics`, `topic-regex`)
    and their partitions (all by default), each selected partition becoming a mirror of its own."""

    name: MirrorName
    enabled: Annotated[bool, msgspec.Meta(description="false: the entry is checked but mirrors nothing.")] = True
    cluster: Annotated[
        ClusterName | None, msgspec.Meta(description="The source cluster, by its name in `clusters`; or give `source`.")
    ] = None
    source: Annotated[
        SourceConfig | None,
        msgspec.Meta(description="The source cluster written out in the entry (instead of `cluster`)."),
    ] = None
    topic: Annotated[
        TopicName | None, msgspec.Meta(description="Single form: the source topic; needs `partition`.")
    ] = None
    partition: Annotated[
        Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None,
        msgspec.Meta(description="Single form: the source partition."),
    ] = None
    topics: Annotated[
        Annotated[list[TopicName], msgspec.Meta(min_length=1)] | None,
        msgspec.Meta(
            description="Selection: these topics (internal topics such as __consumer_offsets only when named here).",
        ),
    ] = None
    topic_regex: Annotated[
        NonEmptyStr | None,
        msgspec.Meta(
            description="Selection: every topic whose whole name matches this Python regular expression; internal "
            "topics (names starting with '__', _schemas) never match.",
        ),
    ] = None
    exclude_regex: Annotated[
        NonEmptyStr | None,
        msgspec.Meta(description="Selection: topics whose whole name matches this are left out."),
    ] = None
    partitions: Annotated[
        Literal["all"] | PartitionList | None,
        msgspec.Meta(description="Selection: `all` (the default; partitions added later are mirrored too) or a list."),
    ] = None
    destination_name_override: Annotated[
        DestinationName | None, msgspec.Meta(description="Single form: the destination name, used as is.")
    ] = None
    destination_name: Annotated[
        DestinationNameRule | None,
        msgspec.Meta(description="How topic names become destination names; `defaults.destination-name` when omitted."),
    ] = None
    flush: Annotated[
        FlushConfig | None,
        msgspec.Meta(description="Flush policy of this entry's mirrors; `defaults.flush`, then the destination's."),
    ] = None
    start_at: Annotated[
        str | None,
        msgspec.Meta(
            description="Where a mirror whose destination is empty begins: earliest (the source's log start), latest "
            "(the source's end when the mirror starts), or an ISO 8601 time with a zone such as 2026-11-01T00:00:00Z "
            "(the first offset whose timestamp is at or after it). Ignored once the destination holds data. Until "
            "its first flush lands, a restarted mirror decides again. `defaults.start-at` when omitted, else earliest."
        ),
    ] = None
    schemas: Annotated[
        SchemasConfig | None,
        msgspec.Meta(
            description="Kafka destinations: copy the schemas of the records' keys and values to the destination's "
            "registry and give each record its ID there (`clusters.<c>.schema-registry` and "
            "`destination.schema-registry` needed). Filesystem and S3: keep the schemas the records reference in "
            "the archive (`<dest-name>/_schemas/<id>.json`) for `restore` (strict and lenient alike; the cluster's "
            "`schema-registry` needed)."
        ),
    ] = None

    @property
    def is_selection(self) -> bool:
        return self.topics is not None or self.topic_regex is not None


class Config(_Strict, frozen=True):
    """A whole process: one destination block shared by the mirrors of every entry."""

    destination: Destination
    mirrors: Annotated[list[MirrorConfig], msgspec.Meta(min_length=1)]
    clusters: Annotated[
        dict[ClusterName, SourceConfig],
        msgspec.Meta(description="Named source clusters, referenced by `cluster:` in entries."),
    ] = msgspec.field(default_factory=dict)
    defaults: MirrorDefaults = msgspec.field(default_factory=MirrorDefaults)
    discovery: DiscoveryConfig = msgspec.field(default_factory=DiscoveryConfig)
    on_mirror_failure: Annotated[
        Literal["exit", "restart"],
        msgspec.Meta(
            description="exit: a failed mirror stops the process (exit 1) for the orchestrator to restart. restart: "
            "only that mirror is restarted, with backoff from 1 s doubling to 60 s, while the others go on; a "
            "failure that says the data or ownership is wrong (corrupt chain, data loss, a second writer) stops "
            "that mirror for good instead."
        ),
    ] = "exit"
    spark: SparkConfig = msgspec.field(default_factory=SparkConfig)
