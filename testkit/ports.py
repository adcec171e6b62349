"""Pick free TCP ports on the loopback interface for the services the tests start.

Ports come from below the kernel's ephemeral range: a port the kernel hands out itself (bind to port 0) is one it
also gives to outgoing connections as their local port, so any client connecting between the choice and the
server's bind could take it (SeaweedFS once died on "address already in use" for its S3 port in a CI run). They
are drawn at random, so parallel test workers rarely draw the same one, and each is bound once to check it is free.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

HOST = "127.0.0.1"
LOWEST = 10_000  # below: well-known and registered services
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that were free a moment ago, outside the ephemeral range.

    All sockets stay bound until every port is chosen, so no port is drawn twice. Another test worker may still
    draw the same port before it is used; at random over twenty thousand ports, that race is rare.
    """
    high = ephemeral_start()
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count * 100):
            if len(ports) == count:
                break
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            port = _random.randrange(LOWEST, high) if high > LOWEST + count else 0
            try:
                sock.bind((HOST, port))
            except OSError:
                continue  # taken: draw again
            ports.append(int(sock.getsockname()[1]))
        if len(ports) < count:
            raise OSError(f"no {count} free ports found on {HOST} between {LOWEST} and {high}")
        return ports


def free_port() -> int:
    """Return one free port on 127.0.0.1."""
    return free_ports(1)[0]
