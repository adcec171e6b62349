"""Installed versions, for `--version` and the build_info metric."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version(package: str) -> str | None:
    """The installed distribution's version; None when it is not installed (a checkout run as is)."""
    try:
        return version(package)
    except PackageNotFoundError:
        return None
