"""librdkafka's own check of a `client-properties` map: a client handle made with each key and no broker to reach,
so a typo in a name or a value is a config error (exit 2) at load, not a Spark task failing later."""

from __future__ import annotations

from collections.abc import Mapping


def librdkafka_refusal(properties: Mapping[str, str], client: str) -> tuple[str, str] | None:
    """librdkafka's own check of names and values: a client handle made with no broker to connect to."""
    from confluent_kafka import Consumer, KafkaException, Producer

    quiet = {"log_level": 0}  # no "no bootstrap.servers" or "consumer property" warnings on stderr
    for key, value in properties.items():
        try:
            if client == "consumer":
                Consumer({"group.id": "mirror-v3.config-check", key: value, **quiet}).close()
            else:
                Producer({key: value, **quiet})
        except KafkaException as exc:
            error = exc.args[0] if exc.args else exc
            text = error.str() if hasattr(error, "str") else str(error)
            return key, f"librdkafka refuses it: {text}"
        except (TypeError, ValueError) as exc:
            return key, f"librdkafka refuses it: {exc}"
    return None
