"""Secret values the process has read, so no log line can carry them.

Whatever resolves a secret (an S3 key, a SASL or TLS key password, a secret-looking `spark.conf`
entry) calls `remember`; the log formatters pass every finished line through `redact`. This catches
what third-party libraries print at DEBUG (botocore logs request headers, for instance), which no
per-call care in our own code could.
"""

from __future__ import annotations

import json
import re
import threading

REDACTED = "***"
# Spark's own spark.redaction.regex, applied to spark.conf keys.
SECRET_KEY_PATTERN = re.compile(r"(?i)secret|password|token|access[.]key|credential")
_MIN_LENGTH = 4  # shorter values would blank out ordinary words

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()


def remember(value: str) -> str:
    """Register a secret value and return it unchanged."""
    global _secrets
    if len(value) >= _MIN_LENGTH:
        # As written, and as it appears inside a JSON string (LOG_FORMAT=json escapes quotes etc.).
        forms = {value, json.dumps(value)[1:-1]}
        with _lock:
            # Longest first, so a secret containing another is replaced whole.
            _secrets = tuple(sorted(set(_secrets) | forms, key=len, reverse=True))
    return value


def redact(text: str) -> str:
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
