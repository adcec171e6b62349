"""Turn any exception into one operator-readable line (no traceback, no Java stack)."""

from __future__ import annotations

from core.errors import MirrorV3Error, first_line


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, MirrorV3Error):
        return str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        return _describe_java(java)
    return first_line(exc, named=True)


def _describe_java(java: object) -> str:
    """The innermost cause is usually the useful one (e.g. OffsetOutOfRange under a SparkException)."""
    messages: list[str] = []
    current = java
    for _ in range(10):
        if current is None:
            break
        try:
            messages.append(str(current.toString()).splitlines()[0])  # type: ignore[attr-defined]
            current = current.getCause()  # type: ignore[attr-defined]
        except Exception:
            break
    if not messages:
        return "Spark job failed"
    return messages[-1] if len(messages) == 1 else f"{messages[-1]} (in {messages[0][:200]})"
