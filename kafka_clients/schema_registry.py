"""A client of a schema registry with the Confluent REST API (Confluent Schema Registry, Apicurio's `ccompat`,
Karapace, Redpanda's), the calls mirroring schemas needs: a schema by ID and where it is registered, a subject's
versions, a lookup, a registration. Blocking (urllib), so a Spark task can call it; one instance per registry and
Python worker, kept by `registry_for`.

Errors carry the registry (its URL, never a credential), the request and the registry's answer. What may pass
(a refused connection, a timeout, a 5xx, 429) is a `RegistryUnavailableError`, which the caller retries as it
retries its destination; an answer about the request (404, 409, 422, ...) is a `RegistryRequestError`.

Why not confluent-kafka's `SchemaRegistryClient` (pinned, used by the end-to-end tests), checked against 2.16.1: a
mirror must copy a schema exactly, and that client parses a data contract into its own models, which drop every
field they do not know (a newer registry's: `tests/test_schema_contracts.py` shows it), while this one passes the
registry's JSON through; it cannot keep certificate verification while skipping the hostname check
(`check-hostname: false`), and it sends a static bearer token only with Confluent Cloud's logical-cluster header;
its own retries would run under ours (a deadline per operation, `sinks.retry`), and it brings httpx, authlib,
cachetools and attrs into the image. What it would replace here is one request function (`_call`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from core.errors import MirrorV3Error
from core.process_cache import PerProcess
from kafka_clients.tls import tls_context

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class RegistryAccess:
    """How to reach one registry: a plain value that travels to the executors (secrets resolved on the driver,
    the TLS context built where it is used)."""

    url: str  # the API's base, e.g. http://registry:8081 or https://host/apis/ccompat/v7
    username: str | None = None  # basic authentication
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Reference:
    name: str  # how the schema names the referenced one (an Avro type, a Protobuf import path)
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    text: str
    schema_type: str = "AVRO"  # AVRO, JSON or PROTOBUF
    references: tuple[Reference, ...] = ()
    # A data contract's parts (Confluent 7.4+): the schema's `metadata` and `ruleSet`, each as canonical JSON text
    # (keys sorted), so that a schema stays a hashable value and two equal contracts compare equal. They travel with
    # the schema: registered with it, archived with it.
    metadata: str | None = None
    rule_set: str | None = None


@dataclass(frozen=True)
class SubjectVersion:
    subject: str
    version: int
    schema_id: int
    schema: Schema


class RegistryRequestError(MirrorV3Error):
    """The registry answered the request with an error about it (unknown ID or subject, an incompatible schema)."""

    def __init__(self, registry: str, request: str, status: int, error_code: int | None, message: str) -> None:
        self.registry, self.request, self.status = registry, request, status
        self.error_code, self.message = error_code, message
        super().__init__(f"schema registry {registry}: {request}: {status} {message}")


class RegistryUnavailableError(MirrorV3Error):
    """The registry could not be reached or could not answer now (connection, timeout, 5xx, 429): worth retrying."""

    def __init__(self, registry: str, request: str, reason: str) -> None:
        self.registry, self.request, self.reason = registry, request, reason
        super().__init__(f"schema registry {registry} unreachable: {request}: {reason}")


class RegistryClient:
    def __init__(self, access: RegistryAccess) -> None:
        self.access = access
        self.url = access.url.rstrip("/")
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if access.bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {access.bearer_token}"
        elif access.username is not None:
            pair = f"{access.username}:{access.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._context = (
            tls_context(access.ca_file, access.cert_file, access.key_file, access.key_password, access.check_hostname)
            if self.url.startswith("https:")
            else None
        )

    def schema(self, schema_id: int) -> Schema:
        return _schema(self._call("GET", f"/schemas/ids/{schema_id}"))

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        """Every (subject, version) the schema is registered as."""
        found = self._call("GET", f"/schemas/ids/{schema_id}/versions")
        return [(str(entry["subject"]), int(entry["version"])) for entry in found]

    def versions(self, subject: str) -> list[int]:
        """The subject's versions in order; [] when the subject does not exist."""
        try:
            return [int(v) for v in self._call("GET", f"/subjects/{_quoted(subject)}/versions")]
        except RegistryRequestError as exc:
            if exc.status == 404:
                return []
            raise

    def version(self, subject: str, version: int) -> SubjectVersion:
        found = self._call("GET", f"/subjects/{_quoted(subject)}/versions/{version}")
        return SubjectVersion(str(found["subject"]), int(found["version"]), int(found["id"]), _schema(found))

    def lookup(self, subject: str, schema: Schema) -> SubjectVersion | None:
        """The version of `subject` holding `schema`, or None (neither the subject nor the schema is there)."""
        try:
            found = self._call("POST", f"/subjects/{_quoted(subject)}", _body(schema))
        except RegistryRequestError as exc:
            if exc.status == 404:
                return None
            raise
        return SubjectVersion(str(found.get("subject", subject)), int(found["version"]), int(found["id"]), schema)

    def subjects(self) -> list[str]:
        return [str(subject) for subject in self._call("GET", "/subjects")]

    def compatibility(self, subject: str) -> str | None:
        """The compatibility level set on the subject itself; None when it has none of its own."""
        try:
            found = self._call("GET", f"/config/{_quoted(subject)}")
        except RegistryRequestError as exc:
            if exc.status == 404:
                return None
            raise
        level = found.get("compatibilityLevel") or found.get("compatibility")
        return None if level is None else str(level)

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call("PUT", f"/config/{_quoted(subject)}", {"compatibility": level})

    def register(self, subject: str, schema: Schema) -> int:
        """Register `schema` under `subject` (a new version, or the existing one when it is there); its ID."""
        return int(self._call("POST", f"/subjects/{_quoted(subject)}/versions", _body(schema))["id"])

    def ping(self) -> None:
        """One light request (the global compatibility level) that returns once the registry answered, a refusal
        (401, 404) included; RegistryUnavailableError when it did not answer."""
        with contextlib.suppress(RegistryRequestError):  # an answer, whatever it says
            self._call("GET", "/config")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request_name = f"{method} {path}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.access.timeout_s, context=self._context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            if exc.code >= 500 or exc.code == 429:
                raise RegistryUnavailableError(self.url, request_name, f"{exc.code} {_message(text)}") from None
            raise RegistryRequestError(self.url, request_name, exc.code, _error_code(text), _message(text)) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise RegistryUnavailableError(self.url, request_name, str(reason)) from None
        except ValueError as exc:  # not JSON: not a schema registry answering
            raise RegistryRequestError(self.url, request_name, 200, None, f"not a registry's answer: {exc}") from None


_clients: PerProcess[RegistryAccess, RegistryClient] = PerProcess(RegistryClient)


def registry_for(access: RegistryAccess) -> RegistryClient:
    """This process's client of the registry (Python workers run many tasks: one client each, not one per task)."""
    return _clients.get(access)


def _quoted(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _body(schema: Schema) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": schema.text}
    if schema.schema_type != "AVRO":
        body["schemaType"] = schema.schema_type
    if schema.references:
        body["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references]
    if schema.metadata is not None:
        body["metadata"] = json.loads(schema.metadata)
    if schema.rule_set is not None:
        body["ruleSet"] = json.loads(schema.rule_set)
    return body


def _schema(found: dict[str, Any]) -> Schema:
    references = tuple(
        Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in found.get("references") or ()
    )
    return Schema(
        str(found["schema"]),
        str(found.get("schemaType") or "AVRO"),
        references,
        canonical(found.get("metadata")),
        canonical(found.get("ruleSet")),
    )


def canonical(part: Any) -> str | None:
    """A data contract's part as canonical JSON text; None when the registry gave none (or null)."""
    return None if part is None else json.dumps(part, sort_keys=True, separators=(",", ":"))


def _error_code(text: str) -> int | None:
    try:
        code = json.loads(text).get("error_code")
    except (ValueError, AttributeError):
        return None
    return int(code) if isinstance(code, int) else None


def _message(text: str) -> str:
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text.strip()[:200]
