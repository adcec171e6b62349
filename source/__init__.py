"""The source: offsets of the source cluster, the Spark session, the task reader of exact ranges, outages."""
