"""The schedule library: persistent, target-aware store of tuned schedules."""

from .backend import LibraryError, parse_url
from .schema import FAILED_SECONDS, PROVENANCES
from .store import Library, Record, open_library, plain, target_key

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
