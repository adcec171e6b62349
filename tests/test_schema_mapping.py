"""Source schema IDs to destination IDs, strict and lenient, against an in-memory registry with the Confluent API's
rules (an ID per distinct schema, registry-wide; versions per subject, appended; registering a schema a subject
holds returns its version). The real registry is e2e's (testkit.schema_registry)."""

from __future__ import annotations

import json

import pytest

from core.schema_wire import schema_id, with_schema_id
from kafka_clients.schema_registry import Reference, RegistryRequestError, Schema
from sinks.schemas.mapping import SchemaCopyError, SchemaIdMap, SubjectNames, record_name
from tests.fakes import MemoryRegistry


def avro(name: str, *fields: str, namespace: str = "shop") -> Schema:
    columns = [{"name": f, "type": "string", "default": ""} for f in fields]
    return Schema(json.dumps({"type": "record", "name": name, "namespace": namespace, "fields": columns}))


V1, V2, V3 = avro("Order", "id"), avro("Order", "id", "note"), avro("Order", "id", "note", "shop")
VALUE = SubjectNames("topic", "orders", "orders", "value")


def registries() -> tuple[MemoryRegistry, MemoryRegistry]:
    return MemoryRegistry("http://source"), MemoryRegistry("http://destination", first_id=500)


def test_lenient_keeps_the_source_order_around_the_destinations_own_versions_and_gives_its_ids() -> None:
    source, destination = registries()
    ids = [source.register("orders-value", schema) for schema in (V1, V2, V3)]
    own = avro("Order", "id", "local")
    destination.register("orders-value", own)  # a version of the destination's own, before the copies
    mapping = SchemaIdMap(source, destination, "lenient", VALUE)
    second = mapping.destination_id(ids[1])
    assert destination.subjects["orders-value"] == [own, V1, V2]  # v1 first: the relative order holds
    assert second == destination.ids[V2] != ids[1]
    assert mapping.destination_id(ids[0]) == destination.ids[V1]
    requests = source.requests + destination.requests
    assert mapping.destination_id(ids[1]) == second and source.requests + destination.requests == requests  # cached

    broken = MemoryRegistry("http://destination")
    broken.register("orders-value", V2)  # someone copied v2 before v1
    with pytest.raises(SchemaCopyError) as caught:
        SchemaIdMap(source, broken, "lenient", VALUE).destination_id(ids[1])
    assert (caught.value.subject, caught.value.version) == ("orders-value", 1)


def test_strict_completes_a_copy_and_refuses_a_destination_subject_that_is_not_one() -> None:
    source, destination = registries()
    ids = [source.register("orders-value", schema) for schema in (V1, V2, V3)]
    destination.register("orders-value", V1)  # a prefix: completed
    assert SchemaIdMap(source, destination, "strict", VALUE).destination_id(ids[1]) == destination.ids[V2]
    assert destination.subjects["orders-value"] == [V1, V2]

    other = MemoryRegistry("http://destination")
    other.register("orders-value", V1)
    other.register("orders-value", avro("Order", "id", "local"))  # version 2 is not the source's
    with pytest.raises(SchemaCopyError) as caught:
        SchemaIdMap(source, other, "strict", VALUE).destination_id(ids[2])
    assert (caught.value.subject, caught.value.version) == ("orders-value", 2)
    assert "not a copy" in str(caught.value)

    longer = MemoryRegistry("http://destination")
    for schema in (V1, V2, V3, avro("Order", "x")):
        longer.register("orders-value", schema)
    with pytest.raises(SchemaCopyError) as caught:
        SchemaIdMap(source, longer, "strict", VALUE).destination_id(ids[0])
    assert (caught.value.subject, caught.value.version) == ("orders-value", 4)


def test_subjects_follow_the_strategy_and_a_renamed_topic() -> None:
    source, destination = registries()
    by_topic = source.register("orders-value", V1)
    by_record = source.register("shop.Order", V2)
    by_both = source.register("orders-shop.Order", V3)
    SchemaIdMap(source, destination, "lenient", SubjectNames("topic", "orders", "orders.dr", "value")).destination_id(
        by_topic
    )
    SchemaIdMap(source, destination, "lenient", SubjectNames("record", "orders", "orders.dr", "value")).destination_id(
        by_record
    )
    names = SubjectNames("topic-record", "orders", "orders.dr", "value")
    SchemaIdMap(source, destination, "lenient", names).destination_id(by_both)
    assert sorted(destination.subjects) == ["orders.dr-shop.Order", "orders.dr-value", "shop.Order"]
    with pytest.raises(SchemaCopyError) as caught:  # the producers used another strategy than the config says
        SchemaIdMap(source, destination, "lenient", SubjectNames("topic", "orders", "orders", "key")).destination_id(
            by_topic
        )
    assert caught.value.subject == "orders-key" and "registered under orders-value" in str(caught.value)


def test_references_are_copied_first_and_point_at_the_destinations_versions() -> None:
    source, destination = registries()
    cents, money = avro("Money", "cents"), avro("Money", "amount")
    source.register("shop.Money", cents)
    source.register("shop.Money", money)  # version 2 is the one referenced
    order = Schema(avro("Order", "id").text, references=(Reference("shop.Money", "shop.Money", 2),))
    order_id = source.register("orders-value", order)
    destination.register("shop.Money", avro("Money", "local"))  # the destination's own version 1
    found = SchemaIdMap(source, destination, "lenient", VALUE).destination_id(order_id)
    assert destination.subjects["shop.Money"] == [avro("Money", "local"), cents, money]
    copied = destination.version("orders-value", 1).schema
    assert copied.references == (Reference("shop.Money", "shop.Money", 3),)  # the destination's version of it
    assert found == destination.ids[copied]


def test_the_wire_format_and_record_names() -> None:
    assert schema_id(b"\0\0\0\1\xf4body") == 500 and schema_id(b"\1\0\0\0\1x") is None and schema_id(None) is None
    assert schema_id(b"\0\0\0") is None and with_schema_id(b"\0\0\0\0\7body", 258) == b"\0\0\0\1\2body"
    assert record_name(V1) == "shop.Order" and record_name(avro("a.B")) == "a.B"
    assert record_name(Schema('{"title": "Order", "type": "object"}', "JSON")) == "Order"
    proto = 'syntax = "proto3";\npackage shop;\nimport "x.proto";\nmessage Order { string id = 1; }\n'
    assert record_name(Schema(proto, "PROTOBUF")) == "shop.Order"


def test_a_registration_another_writer_won_is_taken_as_done() -> None:
    """Apicurio answers the loser of two simultaneous first registrations of a subject with 409."""
    source, destination = registries()
    first = source.register("orders-value", V1)
    register = destination.register

    def racing(subject: str, schema: Schema) -> int:
        register(subject, schema)  # the other writer's, a moment earlier
        raise RegistryRequestError(destination.url, f"POST /subjects/{subject}/versions", 409, None, "already exists")

    destination.register = racing  # type: ignore[method-assign]
    assert SchemaIdMap(source, destination, "lenient", VALUE).destination_id(first) == destination.ids[V1]

    def refusing(subject: str, schema: Schema) -> int:
        raise RegistryRequestError(destination.url, f"POST /subjects/{subject}/versions", 409, 409, "incompatible")

    destination.register = refusing  # type: ignore[method-assign]
    with pytest.raises(RegistryRequestError):  # a refusal of the schema itself stays a refusal
        SchemaIdMap(source, destination, "lenient", VALUE).destination_id(source.register("orders-value", V2))
