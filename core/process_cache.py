"""One value per key for the life of the process. A Spark Python worker runs many tasks one after the other (and
some at once, in threads): clients and caches made once per worker, not once per task, keep their connections and
what they learned. Thread-safe; the values are never dropped (a process holds a handful of keys: one per
destination, registry or mirror)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerProcess(Generic[K, V]):
    def __init__(self, make: Callable[[K], V]) -> None:
        self._make = make
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        with self._lock:
            value = self._values.get(key)
            if value is None:
                value = self._values[key] = self._make(key)
            return value
