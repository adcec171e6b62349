"""mirror-v3: exactly-once mirroring of Kafka partitions (CLI, supervisor, actors)."""
