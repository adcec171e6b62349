"""A schema's data contract (Confluent's `metadata` and `ruleSet`) travels with it: read from the source registry,
kept in the archive, registered at the destination. Before, the client dropped both."""

from __future__ import annotations

import json
from typing import Any

from kafka_clients.schema_registry import Schema, _body, _schema
from sinks.schemas.archived import ArchivedSchema, decode, encode

ANSWER: dict[str, Any] = {
    "schema": '{"type":"string"}',
    "schemaType": "AVRO",
    "metadata": {"properties": {"owner": "payments", "email": "p@example.com"}, "tags": {"ssn": ["PII"]}},
    "ruleSet": {"domainRules": [{"name": "checkSsnLen", "kind": "CONDITION", "type": "CEL", "expr": "size(ssn) == 9"}]},
}


def test_the_registrys_contract_is_kept_and_sent_back_as_it_came() -> None:
    schema = _schema(ANSWER)
    assert schema.metadata is not None and schema.rule_set is not None
    body = _body(schema)
    assert body["metadata"] == ANSWER["metadata"] and body["ruleSet"] == ANSWER["ruleSet"]
    # Canonical: the same contract with its keys in another order is the same schema value.
    reordered = {**ANSWER, "metadata": dict(reversed(list(ANSWER["metadata"].items())))}
    assert _schema(reordered) == schema and hash(_schema(reordered)) == hash(schema)
    plain = _schema({"schema": '{"type":"string"}'})
    assert (plain.metadata, plain.rule_set) == (None, None) and "metadata" not in _body(plain)


def test_the_archive_keeps_the_contract_and_reads_documents_written_before_it() -> None:
    schema = _schema(ANSWER)
    document = ArchivedSchema(
        id=7,
        schema_type=schema.schema_type,
        schema=schema.text,
        references=(),
        subjects=(("orders-value", 1),),
        source_cluster="prod",
        source_topic="orders",
        registry="http://registry:8081",
        seen_at="2026-11-28T00:00:00Z",
        metadata=schema.metadata,
        rule_set=schema.rule_set,
    )
    kept = decode(encode(document))
    assert kept is not None and kept.as_schema() == schema
    older = json.loads(encode(document))
    del older["metadata"], older["rule-set"]
    before = decode(json.dumps(older).encode())
    assert before is not None and before.as_schema() == Schema(schema.text, schema.schema_type)


def test_a_contract_field_a_library_model_does_not_know_is_kept() -> None:
    """A newer registry's contract fields travel as they came. This is why the client is not confluent-kafka's
    (`kafka_clients.schema_registry`): its models drop them. Should a later version keep them, the second half fails
    and the choice is worth making again."""
    from confluent_kafka.schema_registry.schema_registry_client import Metadata, RuleSet

    newer = {
        **ANSWER,
        "metadata": {**ANSWER["metadata"], "retention": {"days": 30}},
        "ruleSet": {"domainRules": [{**ANSWER["ruleSet"]["domainRules"][0], "onFailure": "DLQ", "priority": 2}]},
    }
    body = _body(_schema(newer))
    assert body["metadata"] == newer["metadata"] and body["ruleSet"] == newer["ruleSet"]
    assert "retention" not in Metadata.from_dict(newer["metadata"]).to_dict()
    assert "priority" not in RuleSet.from_dict(newer["ruleSet"]).to_dict()["domainRules"][0]
