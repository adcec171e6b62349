"""Fixtures the fast tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.moto_atomic import make_conditional_writes_atomic
from testkit.ports import HOST, free_port


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """An in-process S3 (moto) on a free port of 127.0.0.1, for one module's tests; its conditional writes atomic, as
    S3's are (`testkit.moto_atomic`)."""
    from moto.server import ThreadedMotoServer

    make_conditional_writes_atomic()
    port = free_port()
    server = ThreadedMotoServer(ip_address=HOST, port=port, verbose=False)
    server.start()
    try:
        yield f"http://{HOST}:{port}"
    finally:
        server.stop()
