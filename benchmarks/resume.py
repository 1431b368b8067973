"""A benchmark's finished steps, kept on disk so that a killed run resumes where it stopped.

Steps are keyed by name; the file also holds a fingerprint of the run's inputs (dataset size,
epochs, ...), and a different fingerprint starts over. A run that spans sessions reads the
dataset as it was when the run first started (:func:`snapshot`), so that records collected
meanwhile (the deep collection, another CPU's) do not start it over; delete the steps file to
take them in. Each step keeps the metadata of the run that computed it (CPU, commit, date:
:func:`common.run_meta`), since a run that spans sessions may span machines.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from common import run_meta

from transtune.files import write_text_atomic


def snapshot(path: Path) -> float:
    """The collection time the run kept in ``path`` reads the dataset up to (records collected
    later are left out), or now for a new run; part of the fingerprint."""
    saved = json.loads(path.read_text()) if path.exists() else {}
    return saved.get("fingerprint", {}).get("snapshot") or time.time()


class Steps:
    def __init__(self, path: Path, fingerprint: dict) -> None:
        self.path, self.fingerprint = path, fingerprint
        saved = json.loads(path.read_text()) if path.exists() else {}
        same = saved.get("fingerprint") == fingerprint
        self.done: dict = saved.get("steps", {}) if same else {}
        self.metas: dict = saved.get("meta", {}) if same else {}

    def run(self, key: str, step: Callable[[], dict]) -> dict:
        """``step()``'s result, computed now or read from an earlier run."""
        if key not in self.done:
            self.done[key] = step()
            self.metas[key] = run_meta()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            state = {"fingerprint": self.fingerprint, "steps": self.done, "meta": self.metas}
            write_text_atomic(self.path, json.dumps(state))
        print(key, self.done[key], flush=True)
        return self.done[key]

    def meta(self, key: str) -> dict | None:
        """The metadata of the run that computed step ``key`` (None: not recorded)."""
        return self.metas.get(key)
