"""moto's S3 with S3's own guarantee for conditional writes: of two `If-None-Match: *` creates of one key, exactly
one lands.

moto (5.2) checks the condition and then stores the object as two separate steps of a request handler, and its
server runs each request on its own thread: a thread switch between the two lets both writers pass the check and both
get 200 (S3 documents that only the first to finish succeeds). On a loaded machine a switch there is likely enough
that a test of two lease takers racing saw both win (CI, 2026-11-28). The product relies on the store's guarantee
(leases, blob claims, document creates), so the tests' moto must give it, or they test moto, not us.

`make_conditional_writes_atomic()` holds one lock around moto's object PUT and multipart-completion handlers, the two
that evaluate a write's condition, in this process. Every server the tests run is started through it: in-process
(`tests/conftest.py`) or as a child (`python -m testkit.moto_atomic -H HOST -p PORT`, moto.server's arguments).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()
_HANDLERS = ("put_object", "_key_response_post")  # PutObject; POST ?uploadId= (CompleteMultipartUpload)
_MARK = "_mirror_v3_atomic"


def make_conditional_writes_atomic() -> None:
    """Serialise moto's write handlers that evaluate If-None-Match / If-Match (idempotent)."""
    from moto.s3.responses import S3Response

    for name in _HANDLERS:
        handler = getattr(S3Response, name)
        if not getattr(handler, _MARK, False):
            setattr(S3Response, name, _locked(handler))


def _locked(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:  # held only while the request is handled in memory: its body was read before
            return handler(*args, **kwargs)

    setattr(locked, _MARK, True)
    return locked


def main(argv: list[str] | None = None) -> None:
    """moto's server (same arguments), its conditional writes atomic."""
    from moto.server import main as moto_main

    make_conditional_writes_atomic()
    moto_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
