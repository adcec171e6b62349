"""The Spark data plane: the process-wide SparkSession and the exact-range Kafka reader."""
