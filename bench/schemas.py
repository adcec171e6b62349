"""schemas: what rewriting schema IDs costs a Kafka → Kafka mirror (issue 35: ≤ 10 % of its throughput for 1 KiB Avro
records), and what keeping the schemas costs an archive (filesystem), each next to the same mirror copying the same
records as they are, in the same run.

Two schema registries (testkit.schema_registry: Apicurio, the Confluent API) and a destination broker are started
for the cell. An Avro schema is registered in the source registry, and a backlog of records in its wire format (a
zero byte, the schema's ID, then the body: `value_size` bytes in all) is produced to the source topic. Then, for each
Kafka path, in turn and each into a fresh destination topic: the mirror with `schemas` off (the baseline: the bytes
copied as they are), and with `schemas: {value: lenient}` (every value's ID looked up and rewritten to the
destination registry's, which holds other subjects first so that its IDs differ); for the filesystem path, the same
with the schemas kept in the archive (each value's ID noted by the blob task, its schema written once beside the
chains before the first blob that carries it is committed). Timed as throughput's mirror runs
(its first read to its last flush, bench.throughput.mirror_backlog), with the CPU of every process; afterwards every
destination offset is verified, and with schemas on every value must carry the destination's ID.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from typing import Any

from bench import raw
from bench.mirror import Context
from bench.scenarios import Scenario
from bench.throughput import mirror_backlog
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import KafkaDataError, consume_all, create_topic, delete_topic
from testkit.schema_registry import SchemaRegistry
from testkit.targets import FilesystemTarget, KafkaTarget

SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "bench",
    "fields": [{"name": "id", "type": "long"}, {"name": "body", "type": "bytes"}],
}
MODES = ("off", "lenient")


def register(registry: str, subject: str, schema: dict[str, Any]) -> int:
    """Register an Avro schema (the Confluent API); its ID."""
    body = json.dumps({"schema": json.dumps(schema)}).encode()
    request = urllib.request.Request(
        f"{registry}/subjects/{subject}/versions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["id"])


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic = ctx.name
    create_topic(ctx.bootstrap, topic, s.partitions)
    ends = dict.fromkeys(range(s.partitions), -(-s.records // s.partitions))
    cell = {"records": sum(ends.values()), "value_size": s.value_size, "partitions": s.partitions}
    with SchemaRegistry() as source, SchemaRegistry() as destination, KafkaBroker() as broker:
        for index in range(5):  # the destination registry's IDs run elsewhere than the source's
            register(destination.url, f"other-{index}-value", {**SCHEMA, "name": f"Other{index}"})
        source_id = register(source.url, f"{topic}-value", SCHEMA)
        header = b"\0" + source_id.to_bytes(4, "big")
        yield {
            **cell,
            "path": "produce",
            "seconds": raw.produce_backlog(ctx.bootstrap, topic, ends, s.value_size, header),
        }
        for path in s.paths:
            for mode in MODES:
                entry: dict[str, Any] = {}
                extra: dict[str, Any] = {}
                if mode != "off":
                    entry = {"source": {"schema-registry": {"url": source.url}}, "schemas": {"value": mode}}
                if path == "filesystem":  # an archive: the IDs noted, their schemas kept beside the chains
                    name = f"{topic}.{mode}"
                    archive = FilesystemTarget(ctx.scratch / "schemas" / mode)
                    result = mirror_backlog(s, ctx, path, archive, name, ends, None, entry, label=f"{path}-{mode}")
                    if mode != "off":
                        _check_kept(archive, name, source_id)
                    yield {**cell, "path": path, "schemas": mode, **result}
                    shutil.rmtree(archive.root, ignore_errors=True)
                    continue
                offsets = path.removeprefix("kafka-")
                name = f"{topic}.{offsets}.{mode}"
                create_topic(broker.bootstrap, name, s.partitions, timeout=60)
                target = KafkaTarget(broker.bootstrap, offsets)
                if mode != "off":
                    extra = {"schema-registry": {"url": destination.url}}
                result = mirror_backlog(
                    s, ctx, path, target, name, ends, broker.pid, entry, extra, label=f"{path}-{mode}"
                )
                if mode != "off":
                    _check_ids(broker.bootstrap, name, header)
                yield {**cell, "path": path, "schemas": mode, **result}
                delete_topic(broker.bootstrap, name)
    delete_topic(ctx.bootstrap, topic)


def _check_ids(bootstrap: str, name: str, source_header: bytes) -> None:
    """Every value of partition 0 carries one ID, and not the source's."""
    headers = {record.value[:5] for record in consume_all(bootstrap, name, 0) if record.value is not None}
    if len(headers) != 1 or source_header in headers:
        raise KafkaDataError(f"{name}: values carry {sorted(headers)}, the source's was {source_header!r}")


def _check_kept(archive: FilesystemTarget, name: str, source_id: int) -> None:
    """The archive kept the one schema its values carry, and nothing else."""
    kept = sorted(path.name for path in (archive.root / name / "_schemas").glob("*.json"))
    if kept != [f"{source_id}.json"]:
        raise KafkaDataError(f"{archive.root / name / '_schemas'}: holds {kept}, expected {source_id}.json only")
