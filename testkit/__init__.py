"""Test helpers: a throwaway single-node Kafka broker and data helpers.

Modules:
    jars         -- where the Kafka broker jars live (and how to fetch them)
    ports        -- free TCP ports on 127.0.0.1
    kafka_broker -- run Apache Kafka (KRaft, single node) as a subprocess
    kafka_data   -- create topics, produce / consume / delete / compact data
    processes    -- child processes for test servers: spawn, log tail, stop, readiness
"""
