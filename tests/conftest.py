"""Fixtures the fast tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.ports import HOST, free_port


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """An in-process S3 (moto) on a free port of 127.0.0.1, for one module's tests."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.stop()
