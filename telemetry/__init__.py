"""What a long-running process shows of itself: its Prometheus metric families (`metrics.py`) and its HTTP endpoint
(`http.py`: /metrics, /healthz, /readyz and /mirrors, and the `ProcessState` JSON that /mirrors answers and `status`
reads), used by `run`, `restore` and `status`. It sits right above `kafka_clients/` and below `sinks/`, so that
every layer with something to count may use the families; what it reports it reads through small protocols (a
mirror, the destination's health), never by importing the layers that own those."""
