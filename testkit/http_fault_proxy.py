"""An HTTP reverse proxy for S3 tests that injects faults on command.

Every request is forwarded to `upstream` (path, query, headers, body,
unchanged; the Host header is kept, see below) unless a fault says otherwise.
The proxy runs in a background thread with its own event loop, so plain
synchronous tests can drive it; the control methods are thread-safe:

    with S3Server(...) as s3, FaultProxy(s3.endpoint) as proxy:
        client = session.create_client("s3", **s3.client_kwargs(proxy.endpoint))
        proxy.fail_next(2, status=503)        # next 2 requests: 503 SlowDown, not forwarded
        proxy.reset_next(1)                   # next request: connection reset mid-body
        proxy.lose_response_next(1)           # forwarded (it happens!), then reset: ambiguous outcome
        proxy.delay(0.5)                      # every request waits 0.5 s first
        proxy.blackhole()                     # accept, never answer
        proxy.clear()                         # back to plain forwarding
        proxy.counts.lists, proxy.counts.by_method["PUT"], proxy.requests[-1].status

Faults queued with *_next() are used up in order, one request each; each may
be limited to matching requests with `match=lambda req: req.method == "PUT"`.
delay() and blackhole() stay on until clear().

Note: aiohttp (3.14, under aiobotocore) silently retries GET/HEAD/PUT/DELETE
once when the connection drops, below botocore's own retries: one
reset_next()/lose_response_next() is invisible to such a call (use n=2);
POST (CreateMultipartUpload, CompleteMultipartUpload) is not retried.

SigV4: clients sign the Host they connect to, i.e. the proxy's host:port. The
proxy forwards that Host header unchanged, so signature-checking servers
(SeaweedFS) accept the forwarded request. `rewrite_host=True` sends the
upstream's host:port instead, which breaks such signatures (useful only to
show that).

Expect: 100-continue: the proxy answers "100 Continue" itself, once it has
decided to read the body (after any delay); a blackholed request never gets
it, like a stalled server. The header is not forwarded upstream.

CLI: `python -m testkit.http_fault_proxy http://127.0.0.1:9000` prints the
proxy endpoint and forwards until SIGINT/SIGTERM (no fault control).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from testkit.ports import HOST, free_port
from testkit.processes import StartStop

# Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded; nor is Expect,
# which the proxy answers itself.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)

# S3 error codes for injected statuses (botocore retries SlowDown as throttling).
DEFAULT_ERROR_CODES: dict[int, str] = {
    400: "BadRequest",
    403: "AccessDenied",
    404: "NoSuchKey",
    409: "OperationAborted",
    412: "PreconditionFailed",
    429: "SlowDown",
    500: "InternalError",
    501: "NotImplemented",
    502: "BadGateway",
    503: "SlowDown",
    504: "GatewayTimeout",
}

# Sub-resources that make a GET on a key something other than GetObject.
_NOT_GET_OBJECT_PARAMS = frozenset(
    {"uploadId", "uploads", "acl", "tagging", "attributes", "legal-hold", "retention", "torrent", "list-type"}
)

_CHUNK = 64 * 1024

# Set on a request once "100 Continue" has been sent.
_CONTINUED = web.RequestKey("fault_proxy_continued", bool)


@dataclass(frozen=True)
class RequestInfo:
    """What a fault's `match` predicate sees of a request (path-style S3 URLs)."""

    method: str
    path: str  # raw (still percent-encoded) path, no query
    query: str  # raw query string, no "?"
    headers: CIMultiDictProxy[str]

    @property
    def params(self) -> dict[str, str]:
        return dict(parse_qsl(self.query, keep_blank_values=True))

    @property
    def bucket(self) -> str | None:
        part = self.path.lstrip("/").split("/", 1)[0]
        return unquote(part) if part else None

    @property
    def key(self) -> str | None:
        parts = self.path.lstrip("/").split("/", 1)
        return unquote(parts[1]) if len(parts) == 2 and parts[1] else None

    @property
    def is_list(self) -> bool:
        """ListObjectsV2: GET on a bucket with list-type=2."""
        return self.method == "GET" and self.params.get("list-type") == "2"

    @property
    def is_get_object(self) -> bool:
        """GetObject: GET on a key without a sub-resource (uploadId, tagging, ...)."""
        return self.method == "GET" and self.key is not None and not _NOT_GET_OBJECT_PARAMS.intersection(self.params)


Match = Callable[[RequestInfo], bool]
FaultKind = Literal["fail", "reset", "lose_response"]


@dataclass
class RequestRecord:
    """One request the proxy saw, for assertions. status is None if no response was sent."""

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    started: float
    fault: str | None = None
    status: int | None = None
    body_bytes: int = 0

    def header(self, name: str) -> str | None:
        lname = name.lower()
        return next((v for k, v in self.headers if k.lower() == lname), None)


@dataclass(frozen=True)
class ProxyCounts:
    """Snapshot of the request counters (requests seen, faults or not)."""

    total: int
    by_method: dict[str, int]
    lists: int
    get_objects: int
    faults: int

    def method(self, name: str) -> int:
        return self.by_method.get(name.upper(), 0)


@dataclass
class _Rule:
    kind: FaultKind
    remaining: int
    match: Match | None
    status: int = 503
    code: str | None = None
    forward: bool = False
    after_bytes: int = 0


@dataclass
class _Decision:
    delay: float = 0.0
    blackhole: bool = False
    rule: _Rule | None = None
    label: str | None = None


@dataclass
class _State:
    rules: list[_Rule] = field(default_factory=list)
    delay: float = 0.0
    delay_match: Match | None = None
    blackhole: bool = False
    blackhole_match: Match | None = None


class FaultProxy(StartStop):
    """HTTP reverse proxy on 127.0.0.1 with runtime-switchable faults (see module docstring)."""

    def __init__(
        self,
        upstream: str,
        *,
        port: int | None = None,
        rewrite_host: bool = False,
        max_records: int = 100_000,
        start_timeout: float = 10.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be http(s)://host:port, got {upstream!r}")
        self.upstream = f"{parts.scheme}://{parts.netloc}"
        self.port = port if port is not None else free_port()
        self.rewrite_host = rewrite_host
        self._start_timeout = start_timeout
        self._lock = threading.Lock()
        self._state = _State()
        self._by_method: collections.Counter[str] = collections.Counter()
        self._lists = 0
        self._get_objects = 0
        self._faults = 0
        self._records: collections.deque[RequestRecord] = collections.deque(maxlen=max_records)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.ServerRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._released: asyncio.Event | None = None
        self._closed = False

    # ------------------------------------------------------------------ addresses

    @property
    def endpoint(self) -> str:
        """The proxy's URL, http://127.0.0.1:<port>: give this to the client instead of the upstream."""
        return f"http://{HOST}:{self.port}"

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FaultProxy:
        if self._closed:
            raise RuntimeError("proxy was stopped; create a new FaultProxy")
        if self.is_running:
            raise RuntimeError(f"proxy already running at {self.endpoint}")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        try:
            self._call(self._astart(), self._start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close the listener and every connection (hung requests included); end the thread."""
        if self._closed:
            return
        self._closed = True
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if thread.is_alive():
                self._call(self._astop(), timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            if not thread.is_alive():
                loop.close()

    def __repr__(self) -> str:
        return f"FaultProxy({self.endpoint} -> {self.upstream}, {'running' if self.is_running else 'stopped'})"

    # ------------------------------------------------------------------ fault control

    def fail_next(
        self,
        n: int = 1,
        status: int = 503,
        code: str | None = None,
        *,
        forward: bool = False,
        match: Match | None = None,
    ) -> None:
        """Answer the next n (matching) requests with `status` and an S3 XML error body.

        code: the S3 error code (default by status: 503 SlowDown, 500 InternalError, ...).
        forward: send the request upstream first (so it takes effect), then
            replace the upstream's answer by the error.
        """
        self._add_rule(_Rule("fail", n, match, status=status, code=code, forward=forward))

    def reset_next(self, n: int = 1, *, after_bytes: int = 0, match: Match | None = None) -> None:
        """Abort (TCP RST) the next n (matching) requests' connections, not forwarded.

        The proxy first reads up to `after_bytes` of the request body (sending
        "100 Continue" if asked), so the client is mid-upload when it happens.
        """
        self._add_rule(_Rule("reset", n, match, after_bytes=after_bytes))

    def lose_response_next(self, n: int = 1, *, match: Match | None = None) -> None:
        """Forward the next n (matching) requests, then reset the client connection
        instead of relaying the response: the request took effect, the client can't know."""
        self._add_rule(_Rule("lose_response", n, match))

    def delay(self, seconds: float, *, match: Match | None = None) -> None:
        """Hold every (matching) request `seconds` before handling it, until clear()."""
        with self._lock:
            self._state.delay = seconds
            self._state.delay_match = match

    def blackhole(self, *, match: Match | None = None) -> None:
        """Accept (matching) requests and never answer them, until clear().

        Requests already swallowed stay hung until the client gives up or the proxy stops.
        """
        with self._lock:
            self._state.blackhole = True
            self._state.blackhole_match = match

    def clear(self) -> None:
        """Drop all pending and persistent faults: plain forwarding from now on."""
        with self._lock:
            self._state = _State()

    @property
    def pending_faults(self) -> int:
        """How many queued *_next() faults are still unused."""
        with self._lock:
            return sum(rule.remaining for rule in self._state.rules)

    # ------------------------------------------------------------------ counters

    @property
    def counts(self) -> ProxyCounts:
        with self._lock:
            return ProxyCounts(
                total=sum(self._by_method.values()),
                by_method=dict(self._by_method),
                lists=self._lists,
                get_objects=self._get_objects,
                faults=self._faults,
            )

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request seen (up to max_records), oldest first."""
        with self._lock:
            return list(self._records)

    def reset_counters(self) -> None:
        with self._lock:
            self._by_method.clear()
            self._lists = self._get_objects = self._faults = 0
            self._records.clear()

    # ------------------------------------------------------------------ internals: thread plumbing

    def _call(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    async def _astart(self) -> None:
        self._released = asyncio.Event()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )
        server = web.Server(self._handle, handler_cancellation=True, access_log=None)
        self._runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, self.port, reuse_address=True)
        await site.start()

    async def _astop(self) -> None:
        if self._released is not None:
            self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _add_rule(self, rule: _Rule) -> None:
        if rule.remaining < 1:
            raise ValueError("n must be at least 1")
        with self._lock:
            self._state.rules.append(rule)

    def _admit(self, info: RequestInfo, record: RequestRecord) -> _Decision:
        """Count the request and pick its fault (using up a queued one)."""
        with self._lock:
            self._by_method[info.method] += 1
            self._lists += info.is_list
            self._get_objects += info.is_get_object
            self._records.append(record)
            state = self._state
            decision = _Decision()
            if state.delay > 0 and (state.delay_match is None or state.delay_match(info)):
                decision.delay = state.delay
            if state.blackhole and (state.blackhole_match is None or state.blackhole_match(info)):
                decision.blackhole = True
                decision.label = "blackhole"
            else:
                for rule in state.rules:
                    if rule.remaining > 0 and (rule.match is None or rule.match(info)):
                        rule.remaining -= 1
                        decision.rule = rule
                        decision.label = f"{rule.kind}:{rule.status}" if rule.kind == "fail" else rule.kind
                        break
                state.rules = [rule for rule in state.rules if rule.remaining > 0]
            if decision.label is not None:
                self._faults += 1
                record.fault = decision.label
            return decision

    # ------------------------------------------------------------------ internals: request handling

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raw_path, _, query = request.raw_path.partition("?")
        info = RequestInfo(request.method, raw_path, query, request.headers)
        record = RequestRecord(
            method=request.method,
            path=raw_path,
            query=query,
            headers=tuple(request.headers.items()),
            started=time.monotonic(),
        )
        decision = self._admit(info, record)
        if decision.delay > 0:
            await asyncio.sleep(decision.delay)
        if decision.blackhole:
            assert self._released is not None
            await self._released.wait()  # until the proxy stops (or the client leaves: cancelled)
            _abort(request)
            return web.Response(status=503)  # never written: the connection is gone
        rule = decision.rule
        if rule is not None and rule.kind == "reset":
            await self._read_some(request, rule.after_bytes, record)
            _abort(request)
            return web.Response(status=503)
        if rule is not None and rule.kind == "fail" and not rule.forward:
            return await self._error_response(request, rule, record, body_read=False)
        try:
            return await self._forward(request, record, rule)
        except aiohttp.ClientError as exc:
            # Upstream down or broken: what a load balancer would say.
            record.status = 502
            return _error(request, 502, "BadGateway", f"fault proxy: upstream {self.upstream} failed: {exc}")

    async def _forward(self, request: web.BaseRequest, record: RequestRecord, rule: _Rule | None) -> web.StreamResponse:
        assert self._session is not None
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in request.headers.items():
            if name.lower() not in _HOP_BY_HOP:
                headers.add(name, value)
        if self.rewrite_host:
            headers["Host"] = urlsplit(self.upstream).netloc
        data: AsyncIterator[bytes] | None = None
        if request.body_exists:
            await _send_continue(request)
            data = _body(request, record)
        url = self.upstream + request.raw_path
        async with self._session.request(
            request.method,
            URL(url, encoded=True),
            headers=headers,
            data=data,
            allow_redirects=False,
        ) as upstream:
            if rule is not None and rule.kind == "lose_response":
                await upstream.read()
                _abort(request)
                return web.Response(status=503)
            if rule is not None and rule.kind == "fail":
                await upstream.read()
                return await self._error_response(request, rule, record, body_read=True)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    response.headers.add(name, value)
            record.status = upstream.status
            await response.prepare(request)
            if request.method != "HEAD":
                async for chunk in upstream.content.iter_chunked(_CHUNK):
                    await response.write(chunk)
            await response.write_eof()
            return response

    async def _read_some(self, request: web.BaseRequest, limit: int, record: RequestRecord) -> None:
        if not request.body_exists or limit <= 0:
            return
        await _send_continue(request)
        while record.body_bytes < limit:
            chunk = await request.content.read(min(_CHUNK, limit - record.body_bytes))
            if not chunk:
                return
            record.body_bytes += len(chunk)

    async def _error_response(
        self, request: web.BaseRequest, rule: _Rule, record: RequestRecord, *, body_read: bool
    ) -> web.StreamResponse:
        code = rule.code or DEFAULT_ERROR_CODES.get(rule.status, "InjectedFault")
        response = _error(request, rule.status, code, f"fault proxy: injected {rule.status} {code}")
        if not body_read and request.body_exists:
            if request.headers.get("Expect", "").lower() == "100-continue":
                # Early rejection, like a server that never sends 100 Continue:
                # the client won't send the body, so this connection is done.
                response.force_close()
            else:
                # The client is already sending the body: take it all, or it
                # may see a reset instead of our answer.
                async for chunk in request.content.iter_chunked(_CHUNK):
                    record.body_bytes += len(chunk)
        record.status = rule.status
        return response


# ---------------------------------------------------------------------- helpers


def _error(request: web.BaseRequest, status: int, code: str, message: str) -> web.Response:
    if request.method == "HEAD":
        return web.Response(status=status)  # S3 sends no body with HEAD errors
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
        f"<Resource>{escape(request.path)}</Resource><RequestId>fault-proxy</RequestId></Error>"
    )
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


async def _send_continue(request: web.BaseRequest) -> None:
    expects = request.headers.get("Expect", "").lower() == "100-continue" and request.version >= (1, 1)
    if expects and not request.get(_CONTINUED, False):
        request[_CONTINUED] = True
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")


async def _body(request: web.BaseRequest, record: RequestRecord) -> AsyncIterator[bytes]:
    async for chunk in request.content.iter_chunked(_CHUNK):
        record.body_bytes += len(chunk)
        yield chunk


def _abort(request: web.BaseRequest) -> None:
    """Close the client connection with a TCP RST (SO_LINGER 0), not a FIN."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


# ------------------------------------------------------------------------------ CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.http_fault_proxy",
        description="Forward HTTP from a free port on 127.0.0.1 to UPSTREAM; print the proxy endpoint.",
    )
    parser.add_argument("upstream", help="e.g. http://127.0.0.1:9000")
    parser.add_argument("--port", type=int, help="listen port (default: a free one)")
    parser.add_argument("--delay", type=float, default=0.0, help="hold every request this many seconds")
    args = parser.parse_args(argv)

    stop_requested = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_requested.set())
    with FaultProxy(args.upstream, port=args.port) as proxy:
        if args.delay:
            proxy.delay(args.delay)
        print(proxy.endpoint, flush=True)
        print(f"forwarding {proxy.endpoint} -> {proxy.upstream}; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop_requested.wait(0.5):
            pass
        counts = proxy.counts
        print(f"{counts.total} requests {counts.by_method}, {counts.faults} faults", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
