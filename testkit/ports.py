"""Pick free TCP ports on the loopback interface."""

from __future__ import annotations

import socket
from contextlib import ExitStack

HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that were free a moment ago.

    All sockets stay bound until every port is chosen, so the OS cannot hand
    out the same port twice. Someone else may still grab one before use; that
    race is accepted for tests.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port() -> int:
    """Return one free port on 127.0.0.1."""
    return free_ports(1)[0]
