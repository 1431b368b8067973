"""A benchmark's finished steps, kept on disk so that a killed run resumes where it stopped.

Steps are keyed by name; the file also holds a fingerprint of the run's inputs (dataset size,
epochs, ...), and a different fingerprint starts over.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from transtune.files import write_text_atomic


class Steps:
    def __init__(self, path: Path, fingerprint: dict) -> None:
        self.path, self.fingerprint = path, fingerprint
        saved = json.loads(path.read_text()) if path.exists() else {}
        self.done: dict = saved.get("steps", {}) if saved.get("fingerprint") == fingerprint else {}

    def run(self, key: str, step: Callable[[], dict]) -> dict:
        """``step()``'s result, computed now or read from an earlier run."""
        if key not in self.done:
            self.done[key] = step()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            state = {"fingerprint": self.fingerprint, "steps": self.done}
            write_text_atomic(self.path, json.dumps(state))
        print(key, self.done[key], flush=True)
        return self.done[key]
