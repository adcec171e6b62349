"""An S3 destination: each chain a key prefix, `s3://<bucket>/<prefix>/<dest-name>/<partition>/`, of Parquet
blobs committed by conditional multipart uploads (`sinks.s3.store`), over one aiobotocore client per process;
leases are objects (`sinks.s3.leases`); documents are objects under the prefix (`sinks.s3.documents`)."""

from __future__ import annotations

from functools import cached_property

from config.errors import ConfigError
from config.model import S3Destination as S3Config
from config.secrets import env_secret
from sinks.blob.chain import BlobStore
from sinks.blob.destination import BlobDestination
from sinks.blob.staging import BlobFormat, BlobStaging
from sinks.destination import SourceRegistries
from sinks.leases import Holder, LeaseStore
from sinks.s3.catalog import s3_chains
from sinks.s3.documents import S3Documents
from sinks.s3.leases import S3Leases
from sinks.s3.reading import S3BlobReader
from sinks.s3.staging import S3Settings
from sinks.s3.store import S3Connection, S3Store
from sinks.tables.iceberg import IcebergCatalog

# The archive's connection settings as each table library names them: region, endpoint, key id, secret, session token.
PYICEBERG_OPTIONS = ("s3.region", "s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token")
DELTA_OPTIONS = ("AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def _client_options(settings: S3Settings, names: tuple[str, str, str, str, str]) -> dict[str, str]:
    """The settings a table library's S3 client needs, under its `names`; credentials only when both are set."""
    region, endpoint, key_id, secret, token = names
    found = {region: settings.region or "us-east-1"}
    if settings.endpoint:
        found[endpoint] = settings.endpoint
    if settings.access_key_id and settings.secret_access_key:
        found[key_id], found[secret] = settings.access_key_id, settings.secret_access_key
    if settings.session_token:
        found[token] = settings.session_token
    return found


def s3_settings(config: S3Config) -> S3Settings:
    """The destination's settings, its secrets read from the environment (ConfigReferenceError when one is not set)."""

    def secret(field: str, variable: str | None) -> str | None:
        return None if variable is None else env_secret(variable, f"destination.{field}")

    return S3Settings(
        bucket=config.bucket,
        region=config.region,
        endpoint=config.endpoint,
        path_style=config.path_style,
        access_key_id=secret("access-key-id-env", config.access_key_id_env),
        secret_access_key=secret("secret-access-key-env", config.secret_access_key_env),
        session_token=secret("session-token-env", config.session_token_env),
        part_size=config.part_size_bytes,
        request_timeout_s=config.request_timeout_ms / 1000,
        server_side_encryption=config.server_side_encryption,
        sse_kms_key_id=config.sse_kms_key_id,
        storage_class=config.storage_class,
    )


class S3Destination(BlobDestination):
    def __init__(
        self, config: S3Config, holder: Holder | None = None, source_registries: SourceRegistries | None = None
    ) -> None:
        super().__init__(config, f"s3://{config.bucket}/{config.prefix}", holder, source_registries)
        self._bucket, self._prefix = config.bucket, config.prefix
        self.root = f"s3://{config.bucket}/{config.prefix}"
        self._s3_config = config

    @cached_property
    def _connection(self) -> S3Connection:
        """One client for every chain, document and lease of the process; made at first use (`plan` needs none)."""
        return S3Connection(s3_settings(self._s3_config), self._prefix)

    def resolve(self) -> None:
        self._connection  # noqa: B018 - the secrets read now

    def _key_prefix(self, destination_name: str, partition: int) -> str:
        return "/".join(p for p in (self._prefix, destination_name, str(partition)) if p) + "/"

    def location(self, destination_name: str, partition: int) -> str:
        return f"s3://{self._bucket}/{self._key_prefix(destination_name, partition)}"

    def _lease_store(self) -> LeaseStore:
        return S3Leases(self._connection, self._prefix)

    def _staged_chain(
        self, destination_name: str, partition: int, blob_format: BlobFormat
    ) -> tuple[BlobStore, BlobStaging]:
        store = S3Store(self._connection, self._key_prefix(destination_name, partition))
        return store, store.staging(self.retry, blob_format)

    def chains(self) -> dict[str, list[int]]:
        return s3_chains(self._connection.settings, self._prefix, self.retry)

    def chain_store(self, destination_name: str, partition: int) -> BlobStore:
        return S3Store(self._connection, self._key_prefix(destination_name, partition))

    def reader(self, destination_name: str, partition: int) -> S3BlobReader:
        return S3BlobReader(self._connection.settings, self._key_prefix(destination_name, partition), self.retry)

    def chain_directory(self, destination_name: str) -> str:
        return f"s3://{self._bucket}/" + "/".join(p for p in (self._prefix, destination_name) if p)

    def file_uri(self, destination_name: str, partition: int, name: str) -> str:
        return f"s3://{self._bucket}/{self._key_prefix(destination_name, partition)}{name}"

    def _default_catalog(self) -> IcebergCatalog:
        raise ConfigError(
            ("destination", "table", "catalog"),
            "an S3 archive's table needs a catalog every process reaches (a SQLite file is one machine's): "
            "give `catalog` (type sql with a database `uri`, rest, glue or hive)",
        )

    def _file_io_properties(self) -> dict[str, str]:
        found = _client_options(self._connection.settings, PYICEBERG_OPTIONS)
        if self._connection.settings.path_style:
            found["s3.force-virtual-addressing"] = "false"
        return found

    def delta_storage(self) -> dict[str, str]:
        """delta-rs's options for the archive's bucket: its endpoint and credentials, and conditional puts for the
        log (`If-None-Match`, which AWS S3, MinIO and R2 honour: the mirror's start says whether this store does), so
        that two shards committing to one table never both write one version."""
        settings = self._connection.settings
        found = {**_client_options(settings, DELTA_OPTIONS), "aws_conditional_put": "etag"}
        if settings.endpoint and settings.endpoint.startswith("http://"):
            found["AWS_ALLOW_HTTP"] = "true"
        if settings.path_style:
            found["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        return found

    def documents(self) -> S3Documents:
        return S3Documents(self._connection, self._prefix)
