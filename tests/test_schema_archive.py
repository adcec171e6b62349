"""The schemas an archive keeps (sinks.schemas.archive, sinks.schemas.archived): a document for every ID its blobs
carry and for all each needs, written needed-first, fetched once; and the read-only registry a restore makes of
them, which copies subjects into a new registry as a live source would. In-memory registries with the Confluent
API's rules; the real registry is e2e's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_clients.schema_registry import Reference, RegistryAccess, RegistryUnavailableError, Schema
from sinks.filesystem.documents import FilesystemDocuments
from sinks.schemas.archive import SchemaArchive, read_schemas
from sinks.schemas.archived import ArchivedRegistry, ArchivedSchemaMissingError
from sinks.schemas.mapping import SchemaIdMap, SubjectNames
from sinks.schemas.rewrite import RegistryOutageError
from tests.fakes import MemoryRegistry


def order(*fields: dict[str, str]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": list(fields)})


LINE = Schema(json.dumps({"type": "record", "name": "Line", "namespace": "shop", "fields": []}))
V1, V2 = Schema(order()), Schema(order({"name": "id", "type": "long"}))
V3 = Schema(order({"name": "line", "type": "shop.Line"}), references=(Reference("shop.Line", "shop.Line", 1),))


class RecordingDocuments(FilesystemDocuments):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.added: list[str] = []

    async def add(self, directory: str, name: str, data: bytes) -> None:
        self.added.append(name)
        await super().add(directory, name, data)


def source_registry() -> tuple[MemoryRegistry, list[int]]:
    source = MemoryRegistry("http://source")
    source.register("shop.Line", LINE)
    return source, [source.register("orders-value", schema) for schema in (V1, V2, V3)]


def archive(store: FilesystemDocuments, registry: MemoryRegistry) -> SchemaArchive:
    access = RegistryAccess(registry.url)
    return SchemaArchive(store, "orders", access, ("value",), "prod", "orders", client=registry)  # type: ignore[arg-type]


async def test_a_schema_is_kept_after_all_it_needs_and_fetched_once(tmp_path: Path) -> None:
    source, (v1, v2, v3) = source_registry()
    store = RecordingDocuments(tmp_path)
    kept = archive(store, source)
    await kept.keep([v3])
    line = source.ids[LINE]
    assert store.added[-1] == f"{v3}.json"  # after the earlier versions of its subject and what it references
    assert sorted(store.added) == sorted(f"{i}.json" for i in (line, v1, v2, v3))
    document = json.loads((tmp_path / "orders" / "_schemas" / f"{v3}.json").read_text())
    assert document["subjects"] == [["orders-value", 3]] and document["references"][0]["subject"] == "shop.Line"
    assert document["source-topic"] == "orders" and document["schema-type"] == "AVRO"

    asked = source.requests
    await kept.keep([v1, v3])
    await archive(RecordingDocuments(tmp_path), source).keep([v2, line])  # a new process lists, then knows
    assert source.requests == asked

    down = MemoryRegistry("http://down")

    def unavailable(schema_id: int) -> Schema:
        raise RegistryUnavailableError(down.url, f"GET /schemas/ids/{schema_id}", "connection refused")

    down.schema = unavailable  # type: ignore[method-assign]
    outage = RecordingDocuments(tmp_path / "other")
    with pytest.raises(RegistryOutageError) as caught:  # a transient destination failure: the commit is retried
        await archive(outage, down).keep([1])
    assert caught.value.registry == "http://down" and outage.added == []


async def test_a_restore_copies_the_kept_subjects_as_a_live_source_would(tmp_path: Path) -> None:
    source, (_, _, v3) = source_registry()
    store = FilesystemDocuments(tmp_path)
    await archive(store, source).keep([v3])
    kept = await read_schemas(store, "orders")
    assert kept.source_topic == "orders" and len(kept.documents) == 4
    destination = MemoryRegistry("http://destination", first_id=500)
    names = SubjectNames("topic", "orders", "orders-restored", "value")
    restored = SchemaIdMap(ArchivedRegistry(kept), destination, "strict", names).destination_id(v3)
    copied = destination.subjects["orders-restored-value"]
    assert copied[:2] == [V1, V2] and copied[2].text == V3.text and restored == destination.ids[copied[2]]
    assert copied[2].references == (Reference("shop.Line", "shop.Line", 1),) and destination.subjects["shop.Line"]

    with pytest.raises(ArchivedSchemaMissingError) as caught:
        ArchivedRegistry(kept).schema(99)
    assert caught.value.what == "schema ID 99" and "archived without schemas" in str(caught.value)
