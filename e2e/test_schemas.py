"""Schemas travel with the records (Kafka → Kafka) between two real registries: the destination subject made a copy
(strict) or given the source's versions among its own (lenient), each record's schema ID rewritten to the
destination's, read back by a consumer of the destination with the destination registry's deserializer and
compared with the source record by record; a new schema version mid-stream and a kill -9; records not in the wire
format copied as they are and counted; a destination subject that is not a copy refused in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from e2e.harness import mirror_config, partitions_of, readyz, refused, start
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import Record, consume_all, create_topic, produce, watermarks
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.schema_registry import SchemaRegistry
from testkit.targets import FilesystemTarget, KafkaTarget
from testkit.tcp_proxy import TcpProxy

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
NOTE = {"name": "note", "type": ["null", "string"], "default": None}
SHOP = {"name": "shop", "type": "string", "default": "main"}
V1 = json.dumps(ORDER)
V2 = json.dumps({**ORDER, "fields": [*ORDER["fields"], NOTE]})
V3 = json.dumps({**ORDER, "fields": [*ORDER["fields"], NOTE, SHOP]})
LINE = {"type": "record", "name": "Line", "namespace": "shop", "fields": [{"name": "sku", "type": "string"}]}
WITH_LINE = json.dumps({**ORDER, "fields": [*ORDER["fields"], NOTE, {"name": "line", "type": "shop.Line"}]})
MONEY_V1 = 'syntax = "proto3";\npackage shop;\n\nmessage Money {\n  int64 cents = 1;\n}\n'
MONEY_V2 = 'syntax = "proto3";\npackage shop;\n\nmessage Money {\n  int64 cents = 1;\n  string currency = 2;\n}\n'
MONEY_LOCAL = 'syntax = "proto3";\npackage shop;\n\nmessage Money {\n  int64 units = 1;\n}\n'
RECEIPT = (
    'syntax = "proto3";\npackage shop;\n\nimport "money.proto";\n\n'
    "message Receipt {\n  string id = 1;\n  shop.Money total = 2;\n}\n"
)
LOCAL = json.dumps({**ORDER, "fields": [*ORDER["fields"], {"name": "local", "type": "int", "default": 0}]})


def avro_records(
    registry: SchemaRegistryClient, topic: str, schema: str | Schema, orders: list[dict[str, Any]]
) -> list[Record]:
    """Values as a producer with the registry's Avro serializer writes them (the schema registered as needed)."""
    serialize = AvroSerializer(registry, schema)
    context = SerializationContext(topic, MessageField.VALUE)
    return [Record(f"k{order['id']}".encode(), serialize(order, context)) for order in orders]


def with_schemas(config: Path, source: str, destination: str, mode: str) -> Path:
    """The mirror config with the registries (their URLs) and every entry's values copied in `mode`."""
    document = yaml.safe_load(config.read_text())
    document["destination"]["schema-registry"] = {"url": destination}
    for entry in document["mirrors"]:
        entry["source"]["schema-registry"] = {"url": source}
        entry["schemas"] = {"value": mode}
    config.write_text(yaml.safe_dump(document))
    return config


# preserve-lenient in the soak run (CI time): lenient mapping is also taken end to end by the registry-outage and the
# archive tests below (and tests/test_schema_mapping.py); renumber-strict stays.
@pytest.mark.parametrize(
    ("offsets", "mode"), [pytest.param("preserve", "lenient", marks=pytest.mark.soak), ("renumber", "strict")]
)
def test_schemas_travel_with_the_records(
    kafka: KafkaBroker,
    kafka_destination_broker: KafkaBroker,
    source_registry: SchemaRegistry,
    destination_registry: SchemaRegistry,
    topic_name: str,
    tmp_path: Path,
    offsets: str,
    mode: str,
) -> None:
    source = SchemaRegistryClient({"url": source_registry.url})
    destination = SchemaRegistryClient({"url": destination_registry.url})
    subject = f"{topic_name}-value"
    # The destination's IDs run elsewhere: other subjects first; lenient also finds a version of its own there.
    for index in range(3):
        destination.register_schema(
            f"{topic_name}-other-{index}", Schema(json.dumps({**ORDER, "name": f"O{index}"}), "AVRO")
        )
    if mode == "lenient":
        destination.register_schema(subject, Schema(LOCAL, "AVRO"))

    create_topic(kafka.bootstrap, topic_name)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    orders = [{"id": n, "note": None if n % 3 else f"note {n}"} for n in range(600)]
    first = avro_records(source, topic_name, V1, [{"id": o["id"]} for o in orders[:300]])
    unframed = [Record(b"raw", b"not in the wire format"), Record(None, b"\x00\x01")]
    produce(kafka.bootstrap, topic_name, 0, first + unframed + avro_records(source, topic_name, V2, orders[300:]))
    target = KafkaTarget(kafka_destination_broker.bootstrap, offsets)
    config = with_schemas(
        mirror_config(
            tmp_path / "mirror.yaml",
            kafka.bootstrap,
            target,
            partitions_of(topic_name, 1),
            flush={"max-time-ms": 500, "max-offsets": 200},
        ),
        source_registry.url,
        destination_registry.url,
        mode,
    )

    if mode == "strict":  # a destination subject that is not a copy: refused, naming it and the version
        destination.register_schema(subject, Schema(LOCAL, "AVRO"))
        line = refused(config, tmp_path / "refused.log", target)
        assert f"subject '{subject}' version 1" in line and "not a copy" in line, line
        destination.delete_subject(subject, permanent=False)
        destination.delete_subject(subject, permanent=True)

    with MirrorRun(config, tmp_path / "run.log", metrics_port=free_port()) as run:
        run.wait_for_offsets(lambda p: target.next_offset(topic_name, p), {0: 602})
        series = {"source_cluster": kafka.bootstrap, "topic": topic_name, "destination": topic_name}
        # Counted when the driver records the flush, which may come a moment after the destination has it.
        run.wait_until(
            lambda: run.metric("mirror_v3_schema_unframed_records_total", **series) == 2,
            30,
            "the 2 records not in the wire format counted",
        )
        run.kill9()  # then a new version appears while the mirror is down, and the mirror continues
    later = [{"id": n, "note": None, "shop": f"shop {n % 4}"} for n in range(600, 900)]
    produce(kafka.bootstrap, topic_name, 0, avro_records(source, topic_name, V3, later))
    with start(config, tmp_path / "run2.log", target) as run:
        run.wait_for_offsets(lambda p: target.next_offset(topic_name, p), {0: 902})
        run.drain()

    # Every destination record: once, in order, decoded with the destination registry as the source's with the
    # source registry; records not in the wire format byte for byte.
    from_source = consume_all(kafka.bootstrap, topic_name, 0)
    landed = target.records(topic_name, 0)
    assert [r.offset for r in landed] == [r.offset for r in from_source]
    context = SerializationContext(topic_name, MessageField.VALUE)
    read_source, read_destination = AvroDeserializer(source), AvroDeserializer(destination)
    for original, copy in zip(from_source, landed, strict=True):
        assert copy.key == original.key
        if original.value is None or original.value[:1] != b"\0" or len(original.value) < 5:
            assert copy.value == original.value
            continue
        assert copy.value is not None and copy.value[5:] == original.value[5:]
        assert read_destination(copy.value, context) == read_source(original.value, context)
    rewritten = [c for o, c in zip(from_source, landed, strict=True) if o.value and c.value and o.value != c.value]
    assert rewritten, "the destination's IDs differ from the source's: records must carry the destination's"

    # verify compares each destination record with its source record as the mirror writes it (the IDs mapped).
    verified = run_cli("verify", "--config", str(config), "--format", "json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    (row,) = json.loads(verified.stdout.splitlines()[-1])["mirrors"]
    assert (row["equal"], row["different"]) == (902, 0), row

    versions = [destination.get_version(subject, v).schema.schema_str for v in destination.get_versions(subject)]
    copied = [json.loads(text or "null") for text in versions]
    expected = [json.loads(text) for text in (V1, V2, V3)]
    if mode == "strict":
        assert copied == expected  # an exact copy
    else:
        assert copied == [json.loads(LOCAL), *expected]  # the source's in order, after the destination's own


def test_migrate_schemas_copies_the_subjects_and_their_compatibility_before_a_cutover(
    kafka: KafkaBroker,
    kafka_destination_broker: KafkaBroker,
    source_registry: SchemaRegistry,
    destination_registry: SchemaRegistry,
    topic_name: str,
    tmp_path: Path,
) -> None:
    source = SchemaRegistryClient({"url": source_registry.url})
    destination = SchemaRegistryClient({"url": destination_registry.url})
    subject, by_name = f"{topic_name}-value", f"{topic_name}.Event"
    for schema in (V1, V2):
        source.register_schema(subject, Schema(schema, "AVRO"))
    source.register_schema(by_name, Schema(json.dumps({**ORDER, "name": "Event"}), "AVRO"))
    source.set_compatibility(subject, "FULL")
    # A Protobuf schema importing another subject's second version: the import is copied first, after the
    # destination's own version of it, and the copy's reference points at the destination's version.
    money, receipt = f"{topic_name}.money.proto", f"{topic_name}.Receipt"
    for text in (MONEY_V1, MONEY_V2):
        source.register_schema(money, Schema(text, "PROTOBUF"))
    source.register_schema(receipt, Schema(RECEIPT, "PROTOBUF", [SchemaReference("money.proto", money, 2)]))
    destination.register_schema(money, Schema(MONEY_LOCAL, "PROTOBUF"))
    create_topic(kafka.bootstrap, topic_name)
    target = KafkaTarget(kafka_destination_broker.bootstrap, "renumber")
    config = with_schemas(
        mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, target, partitions_of(topic_name, 1)),
        source_registry.url,
        destination_registry.url,
        "lenient",
    )
    command = ["migrate-schemas", "--config", str(config), "--subjects", rf"{topic_name}\.(Event|Receipt)"]

    dry = run_cli(*command, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{subject} -> {subject} (lenient): 2 versions, would register 1, 2; compatibility FULL" in dry.stdout
    assert "3 subjects, 4 versions to register" in dry.stdout, dry.stdout
    assert subject not in destination.get_subjects(), "the dry run wrote"

    done = run_cli(*command)
    assert done.returncode == 0, done.stderr
    assert "3 subjects, 4 versions registered" in done.stdout, done.stdout
    copied = [destination.get_version(subject, v).schema.schema_str or "" for v in destination.get_versions(subject)]
    assert [json.loads(text) for text in copied] == [json.loads(V1), json.loads(V2)]
    assert destination.get_versions(by_name) == [1]
    assert destination.get_compatibility(subject) == "FULL"
    imported = [destination.get_version(money, v).schema.schema_str for v in destination.get_versions(money)]
    assert [" ".join((text or "").split()) for text in imported] == [
        " ".join(text.split()) for text in (MONEY_LOCAL, MONEY_V1, MONEY_V2)
    ]
    copy = destination.get_version(receipt, 1).schema
    assert [(r.name, r.subject, r.version) for r in copy.references or []] == [("money.proto", money, 3)]
    again = run_cli(*command)
    assert again.returncode == 0 and "0 versions registered" in again.stdout, again.stdout

    # strict: the destination's money.proto (its own version first) is not a copy. The dry run says so as the real run
    # does, with the same line, and neither registers anything (the copies are planned first, then made).
    with_schemas(config, source_registry.url, destination_registry.url, "strict")
    held = {name: destination.get_versions(name) for name in (subject, money, receipt, by_name)}
    dry, real = run_cli(*command, "--dry-run"), run_cli(*command)
    dry_line, real_line = (r.stderr.strip().splitlines()[-1] for r in (dry, real))
    assert dry.returncode == real.returncode == 1 and dry_line == real_line, dry.stderr + real.stderr
    assert dry_line.startswith(f"migrate-schemas refused: schemas: subject '{money}'"), dry_line
    assert dry_line.endswith("nothing was registered") and "would register" not in dry.stdout, dry_line
    assert {name: destination.get_versions(name) for name in held} == held, "a refused copy registered"


def test_a_registry_down_for_a_while_is_ridden_out(
    kafka: KafkaBroker,
    kafka_destination_broker: KafkaBroker,
    source_registry: SchemaRegistry,
    destination_registry: SchemaRegistry,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """The destination registry stops answering for 30 s while a record of a new schema version waits: the mirror asks
    again until it answers (within retry.deadline-ms), the outage is seen (WARN, gauge, /readyz degraded, an INFO with
    how long it lasted), and then the record is copied exactly once."""
    source = SchemaRegistryClient({"url": source_registry.url})
    create_topic(kafka.bootstrap, topic_name)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, avro_records(source, topic_name, V1, [{"id": n} for n in range(50)]))
    target = KafkaTarget(kafka_destination_broker.bootstrap, "renumber")
    with TcpProxy(destination_registry.port) as proxy:
        behind_proxy = destination_registry.url.replace(f":{destination_registry.port}/", f":{proxy.port}/")
        config = with_schemas(
            mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, target, partitions_of(topic_name, 1)),
            source_registry.url,
            behind_proxy,
            "lenient",
        )
        port = free_port()
        with MirrorRun(config, tmp_path / "run.log", metrics_port=port) as run:
            run.wait_for_offsets(lambda p: target.next_offset(topic_name, p), {0: 50})
            assert run.metric("mirror_v3_schema_registry_up", registry=behind_proxy) == 1
            proxy.refuse(True)
            proxy.cut()
            down_since = time.monotonic()
            later = [{"id": n, "note": "after"} for n in range(50, 80)]
            produce(kafka.bootstrap, topic_name, 0, avro_records(source, topic_name, V2, later))
            run.wait_for_log("schema registry .* failed, retry", timeout=60)
            # Seen from outside within a probe interval (5 s): a WARN, the gauge, /readyz degraded.
            run.wait_for_log('msg="schema registry unreachable"', timeout=15)
            assert run.metric("mirror_v3_schema_registry_up", registry=behind_proxy) == 0
            assert run.metric("mirror_v3_schema_registry_up", registry=source_registry.url) == 1
            code, body = readyz(port)
            assert code == 503 and f"schema registry {behind_proxy} unreachable" in body, body
            time.sleep(max(3.0, 30 - (time.monotonic() - down_since)))  # 30 s down: the mirror keeps asking
            assert target.next_offset(topic_name, 0) == 50, "a record went out before its schema was copied"
            assert run.running, run.tail()
            proxy.refuse(False)
            run.wait_for_offsets(lambda p: target.next_offset(topic_name, p), {0: 80})
            run.wait_for_log('msg="schema registry reachable again"', timeout=15)  # the next probe
            (back,) = run.events("schema registry reachable again")
            assert 28 <= float(back["down_s"]) <= 45, back
            assert run.metric("mirror_v3_schema_registry_up", registry=behind_proxy) == 1
            assert readyz(port)[0] == 200
            run.drain()
    destination = SchemaRegistryClient({"url": destination_registry.url})
    context = SerializationContext(topic_name, MessageField.VALUE)
    read_source, read_destination = AvroDeserializer(source), AvroDeserializer(destination)
    originals = consume_all(kafka.bootstrap, topic_name, 0)
    copies = target.records(topic_name, 0)
    assert [read_destination(c.value, context) for c in copies] == [read_source(o.value, context) for o in originals]


def test_an_archive_keeps_the_schemas_and_a_restore_copies_them_into_a_new_registry(
    kafka: KafkaBroker,
    fs: FilesystemTarget,
    source_registry: SchemaRegistry,
    destination_registry: SchemaRegistry,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """Archived with `schemas`, the archive keeps every schema its records reference (the earlier versions of their
    subject, and a named type another subject holds); `verify` checks each resolves. The source registry is then out
    of the picture: a restore with `schemas` copies the subjects from the archive into another registry whose IDs
    differ, and every restored value decodes with that registry to the source's record; records not in the wire
    format come back as they were. Restored again with preserve, `verify` of the restore maps the IDs as `restore`
    does; a restore needing a document the archive lost is refused before it writes."""
    source = SchemaRegistryClient({"url": source_registry.url})
    destination = SchemaRegistryClient({"url": destination_registry.url})
    for index in range(4):  # the destination's IDs run elsewhere
        destination.register_schema(
            f"{topic_name}-o{index}", Schema(json.dumps({**ORDER, "name": f"O{index}"}), "AVRO")
        )
    create_topic(kafka.bootstrap, topic_name)
    orders = [{"id": n, "note": None if n % 3 else f"note {n}"} for n in range(400)]
    v1 = avro_records(source, topic_name, V1, [{"id": o["id"]} for o in orders[:200]])
    source.register_schema(f"{topic_name}-value", Schema(V2, "AVRO"))  # never used, but registered between
    # The third version's `line` is a named type of its own subject: a reference (Avro named types across subjects).
    line_subject = f"{topic_name}-line"
    source.register_schema(line_subject, Schema(json.dumps(LINE), "AVRO"))
    with_line = Schema(WITH_LINE, "AVRO", [SchemaReference("shop.Line", line_subject, 1)])
    v3 = avro_records(source, topic_name, with_line, [{**o, "line": {"sku": f"s{o['id']}"}} for o in orders[200:]])
    produce(kafka.bootstrap, topic_name, 0, [*v1, Record(b"raw", b"\x00\x01"), *v3])
    config = mirror_config(
        tmp_path / "mirror.yaml", kafka.bootstrap, fs, partitions_of(topic_name, 1), flush={"max-offsets": 150}
    )
    document = yaml.safe_load(config.read_text())
    for entry in document["mirrors"]:
        entry["source"]["schema-registry"] = {"url": source_registry.url}
        entry["schemas"] = {"value": "lenient"}
    config.write_text(yaml.safe_dump(document))
    with start(config, tmp_path / "run.log", fs) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 401})
        run.drain()
    kept = sorted(int(p.stem) for p in (fs.root / topic_name / "_schemas").glob("*.json"))
    versions = [source.get_version(f"{topic_name}-value", v) for v in source.get_versions(f"{topic_name}-value")]
    versions.append(source.get_version(line_subject, 1))
    assert kept == sorted(v.schema_id or 0 for v in versions)  # v2 too (an earlier version), and the named type
    verified = run_cli("verify", "--config", str(config))
    assert verified.returncode == 0, verified.stdout + verified.stderr

    restored = f"{topic_name}-back"
    create_topic(kafka.bootstrap, restored)
    restore = tmp_path / "restore.yaml"
    restore.write_text(
        yaml.safe_dump(
            {
                "archive": fs.config(),
                "restore": [{"topic": topic_name, "rename": restored}],
                "destination": {
                    "type": "kafka",
                    "bootstrap-servers": kafka.bootstrap,
                    "offsets": "renumber",
                    "schema-registry": {"url": destination_registry.url},
                },
                "schemas": {"value": "strict"},
                "spark": {"master": "local[2]"},
            }
        )
    )
    done = run_cli("restore", "--config", str(restore), timeout=300)
    assert done.returncode == 0 and "restored 401 records" in done.stdout, done.stdout + done.stderr
    latest = destination.get_latest_version(f"{restored}-value").schema
    assert latest.schema_str is not None and json.loads(latest.schema_str) == json.loads(WITH_LINE)
    assert [(r.name, r.subject) for r in latest.references or []] == [("shop.Line", line_subject)]
    assert len(destination.get_versions(f"{restored}-value")) == 3, "strict: the subject's versions, in order"
    context = SerializationContext(topic_name, MessageField.VALUE)
    read_source, read_destination = AvroDeserializer(source), AvroDeserializer(destination)
    originals, copies = consume_all(kafka.bootstrap, topic_name, 0), consume_all(kafka.bootstrap, restored, 0)
    assert len(copies) == len(originals) == 401
    for original, copy in zip(originals, copies, strict=True):
        assert copy.key == original.key
        if original.value == b"\x00\x01":
            assert copy.value == original.value
            continue
        assert read_destination(copy.value, context) == read_source(original.value, context)

    # preserve, into a topic of its own: `verify` of the restore maps the last record's IDs as `restore` does.
    document = yaml.safe_load(restore.read_text())
    kept_topic = f"{topic_name}-kept"
    create_topic(kafka.bootstrap, kept_topic)
    document["restore"] = [{"topic": topic_name, "rename": kept_topic}]
    document["destination"]["offsets"] = "preserve"
    preserve = tmp_path / "preserve.yaml"
    preserve.write_text(yaml.safe_dump(document))
    done = run_cli("restore", "--config", str(preserve), timeout=300)
    assert done.returncode == 0 and "restored 401 records" in done.stdout, done.stdout + done.stderr
    verified = run_cli("verify", "--config", str(preserve), "--format", "json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert [row["restored-to"] for row in json.loads(verified.stdout)["partitions"]] == [401], verified.stdout

    (fs.root / topic_name / "_schemas" / f"{kept[-1]}.json").unlink()
    broken = run_cli("verify", "--config", str(config))
    assert broken.returncode == 1 and f"schema ID {kept[-1]}, carried from offset 201" in broken.stdout, broken.stdout
    # A restore needing the lost document is refused before its first record (its dry run says the same line:
    # tests/test_dry_run_parity.py runs every refusal both ways).
    document["restore"] = [{"topic": topic_name, "rename": f"{topic_name}-again"}]
    create_topic(kafka.bootstrap, f"{topic_name}-again")
    lost = tmp_path / "lost.yaml"
    lost.write_text(yaml.safe_dump(document))
    real = run_cli("restore", "--config", str(lost), timeout=300)
    real_line = real.stderr.strip().splitlines()[-1]
    assert real.returncode == 1, real.stdout + real.stderr
    assert real_line.startswith(
        f"restore refused: {topic_name}/0: values carry schema ID {kept[-1]} from offset 201 on"
    )
    assert "holds no schema document" in real_line, real_line
    assert watermarks(kafka.bootstrap, f"{topic_name}-again", 0)[1] == 0, "a refused restore wrote"
