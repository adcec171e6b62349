"""The source clusters: their offsets, asked once per cluster for all its mirrors (`offsets.py`); their reachability
and riding out their outages (`outages.py`); what they hold, for the estate plan (`discovery.py`); the reader of an
exact offset range inside a Spark task (`range_reader.py`); the lookup a Kafka destination checks alignment with
(`lookup.py`)."""
