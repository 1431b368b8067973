"""The schedule library: persistent, target-aware store of tuned schedules."""

from .store import (
    FAILED_SECONDS,
    PROVENANCES,
    Library,
    LibraryError,
    Record,
    open_library,
    parse_url,
    plain,
    target_key,
)

__all__ = [
    "FAILED_SECONDS",
    "PROVENANCES",
    "Library",
    "LibraryError",
    "Record",
    "open_library",
    "parse_url",
    "plain",
    "target_key",
]
