"""The test harness's schema registries (issue 35's first step): two real, independent registries serving the
Confluent REST API, as Kafka users' own clients see them (confluent-kafka's SchemaRegistryClient and its Avro
serializer and deserializer), with records on a real broker carrying the registry's wire format."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import Record, consume_all, create_topic, produce
from testkit.schema_registry import SchemaRegistry

ORDER_V1 = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'
ORDER_V2 = (
    '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, '
    '{"name": "note", "type": ["null", "string"], "default": null}]}'
)


def test_two_independent_registries_serve_the_confluent_api_to_kafka_clients(
    kafka: KafkaBroker, source_registry: SchemaRegistry, destination_registry: SchemaRegistry, topic_name: str
) -> None:
    source = SchemaRegistryClient({"url": source_registry.url})
    destination = SchemaRegistryClient({"url": destination_registry.url})
    subject = f"{topic_name}-value"
    destination.register_schema(f"{topic_name}-other", Schema(ORDER_V2, "AVRO"))  # so the IDs differ
    first = source.register_schema(subject, Schema(ORDER_V1, "AVRO"))
    second = source.register_schema(subject, Schema(ORDER_V2, "AVRO"))
    assert [v for v in source.get_versions(subject)] == [1, 2] and first != second
    with pytest.raises(SchemaRegistryError) as missing:
        destination.get_versions(subject)
    assert missing.value.http_status_code == 404  # what one registry holds, the other does not

    # A producer's serializer writes the wire format: magic byte 0, the schema's 4-byte ID, the Avro body.
    serialize = AvroSerializer(source, ORDER_V2, conf={"auto.register.schemas": False, "use.latest.version": True})
    create_topic(kafka.bootstrap, topic_name)
    orders = [{"id": n, "note": None if n % 2 else f"order {n}"} for n in range(5)]
    context = SerializationContext(topic_name, MessageField.VALUE)
    produce(kafka.bootstrap, topic_name, 0, [Record(None, serialize(order, context)) for order in orders])
    deserialize = AvroDeserializer(source)
    read = consume_all(kafka.bootstrap, topic_name, 0)
    assert all(r.value is not None and r.value[:5] == b"\0" + second.to_bytes(4, "big") for r in read)
    assert [deserialize(r.value, context) for r in read] == orders
