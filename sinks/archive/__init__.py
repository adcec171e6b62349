"""What a blob archive keeps beside its chains: small JSON documents (`documents`) of topic metadata
(`topic_metadata`) and consumer-group positions (`group_positions`)."""
