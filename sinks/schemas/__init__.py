"""Schema IDs across registries: mapped (`mapping`), rewritten in records on their way to a Kafka destination
(`rewrite`), kept in a blob archive (`archive`) and read back from it (`archived`)."""
