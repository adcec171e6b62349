"""Each destination kind as one object (`sinks.destinations.open_destination`): where its mirrors write, what it
keeps and what it asks the run process for, without reaching anything until asked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from config.estate import MirrorSpec
from config.loader import parse_config
from config.model import Config, FlushConfig
from config.secrets import ConfigReferenceError
from kafka_clients.clients import KafkaRecord
from sinks.destination import Destination
from sinks.destinations import open_destination
from sinks.leases import Holder

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """
clusters:
  prod: {{bootstrap-servers: "src:9092"}}
destination: {destination}
mirrors:
  - {{name: m, topic: orders, partition: 3, cluster: prod}}
"""


@pytest.fixture(autouse=True)
def s3_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_ID", "id")
    monkeypatch.setenv("SECRET", "s")


def _config(destination: str) -> Config:
    return parse_config(CONFIG.format(destination=destination), env={"KEY_ID": "id", "SECRET": "s"})


def _mirror(config: Config) -> MirrorSpec:
    source = config.clusters["prod"]
    return MirrorSpec("m", 0, "prod", source, "clusters.prod", "orders", 3, "orders", FlushConfig())


class NoSource:
    async def log_start(self) -> int:
        return 0

    async def record_at(self, offset: int) -> KafkaRecord | None:
        return None


def _opened(config: Config) -> Destination:
    return open_destination(config.destination, source_lookups=lambda mirror: NoSource())


FILESYSTEM = '{type: filesystem, root: "/archive", archive-groups: {groups: [billing]}}'
S3 = (
    "{type: s3, bucket: b, prefix: p, endpoint: 'http://127.0.0.1:1', topic-metadata-interval-ms: 0,"
    " access-key-id-env: KEY_ID, secret-access-key-env: SECRET}"
)
KAFKA = '{type: kafka, bootstrap-servers: "dst:9092", offsets: renumber, create-topics: true}'


@pytest.mark.parametrize(
    ("destination", "where", "location"),
    [
        (FILESYSTEM, "filesystem:/archive", "filesystem:/archive/orders/3"),
        (S3, "s3://b/p", "s3://b/p/orders/3/"),
        (KAFKA, "kafka://dst:9092", "kafka://dst:9092/orders/3 (renumber)"),
    ],
)
async def test_a_mirror_is_where_its_sink_says_it_writes(destination: str, where: str, location: str) -> None:
    config = _config(destination)
    opened = _opened(config)
    assert (opened.where, opened.health.location) == (where, where)
    assert opened.location("orders", 3) == location  # what `plan` shows, without a sink
    sink = opened.sink(_mirror(config), retries=False)
    try:
        assert sink.description == location
    finally:
        await sink.close()


def test_a_blob_destination_keeps_an_archive_and_a_kafka_one_is_a_cluster() -> None:
    filesystem, s3, kafka = (_opened(_config(d)) for d in (FILESYSTEM, S3, KAFKA))
    assert (filesystem.cluster, s3.cluster, kafka.archive) == (None, None, None)
    archives = [d.archive for d in (filesystem, s3)]
    assert archives[0] is not None and archives[0].reader("orders", 3).location("x") == "/archive/orders/3/x"
    assert archives[1] is not None and archives[1].reader("orders", 3).location("x") == "s3://b/p/orders/3/x"
    cluster = kafka.cluster
    assert cluster is not None and cluster.renumbers and cluster.bootstrap_servers == "dst:9092"


def test_each_kind_names_the_process_services_its_settings_ask_for() -> None:
    filesystem, s3, kafka = (_opened(_config(d)).services for d in (FILESYSTEM, S3, KAFKA))
    assert filesystem.topic_metadata_every_s == 60.0  # the default
    assert filesystem.group_positions is not None and filesystem.group_positions.groups == ["billing"]
    assert (filesystem.create_topics, filesystem.sync_groups, filesystem.loop_guard) == (None, None, None)
    assert (s3.topic_metadata_every_s, s3.group_positions) == (None, None)  # interval 0: never
    assert kafka.create_topics is not None and kafka.loop_guard is not None  # renumber
    assert (kafka.sync_groups, kafka.topic_metadata_every_s, kafka.group_positions, kafka.schema_registry) == (
        None,
        None,
        None,
        None,
    )


def test_opening_reaches_nothing_and_reads_no_secret_until_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(S3)
    monkeypatch.delenv("KEY_ID")
    opened = open_destination(config.destination)
    assert opened.location("orders", 3) == "s3://b/p/orders/3/"  # `plan` needs no secret
    with pytest.raises(ConfigReferenceError) as refused:
        opened.resolve()  # what `run` and `status` do first
    assert refused.value.field == "destination.access-key-id-env"


def test_only_a_writing_process_holds_leases() -> None:
    config = _config(FILESYSTEM)
    assert open_destination(config.destination).leases is None
    assert open_destination(config.destination, holder=Holder.of_this_process()).leases is not None


KINDS = {"FilesystemDestination", "S3Destination", "KafkaDestination"}


def test_the_destination_kind_is_looked_at_in_one_place() -> None:
    # Outside config/, only sinks/destinations.py asks which kind a configured destination is; everyone else calls
    # through the Destination it returns (a new kind: one package and one line there).
    asking = []
    for layer in ("core", "kafka_clients", "sinks", "source", "workers", "supervisor", "commands"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                    names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                    if names & KINDS:
                        asking.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                if isinstance(node, ast.MatchClass) and getattr(node.cls, "id", "").removesuffix("Config") in {
                    kind.removesuffix("Destination") for kind in KINDS
                }:
                    asking.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert sorted({place.split(":")[0] for place in asking}) == ["sinks/destinations.py"], asking


def test_an_s3_archives_tables_reach_its_bucket_with_its_endpoint_and_credentials() -> None:
    archive = _opened(_config(S3)).archive
    assert archive is not None and _opened(_config(FILESYSTEM)).archive.delta_storage() is None  # type: ignore[union-attr]
    assert archive.delta_storage() == {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "s",
        "aws_conditional_put": "etag",  # Delta's log versions: If-None-Match
        "AWS_ALLOW_HTTP": "true",
    }
    iceberg = S3_WITH_TABLE.replace("TABLE", "{format: iceberg, catalog: {type: rest, properties: {uri: 'http://c'}}}")
    properties = _opened(_config(iceberg)).archive.table_catalog().properties  # type: ignore[union-attr]
    assert properties == {
        "type": "rest",
        "s3.region": "us-east-1",
        "s3.endpoint": "http://127.0.0.1:1",
        "s3.access-key-id": "id",
        "s3.secret-access-key": "s",
        "uri": "http://c",
    }


S3_WITH_TABLE = S3[:-1] + ", table: TABLE}"
