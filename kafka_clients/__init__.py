"""The Kafka clients: settings from a `security` block, tokens, bootstrap diagnosis and the short-lived clients."""
