"""The TLS context of a client (a broker's or a schema registry's): a CA bundle, an optional client certificate and
key, hostname checking. Raises OSError or ssl.SSLError for files it cannot load; callers name the config field."""

from __future__ import annotations

import ssl


def tls_context(
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    key_password: str | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    if cert_file is not None and key_file is not None:
        context.load_cert_chain(cert_file, key_file, password=key_password)
    context.check_hostname = check_hostname
    return context
