"""Runs of a schedule library: what each tuning or transfer session was, its curves, which
process is running it, and the library's meta values. Mixed into
:class:`~transtune.library.store.Library`, whose ``transaction`` and ``_query`` it uses."""

from __future__ import annotations

import json
import os
import socket
import time

from .backend import LibraryError

CLAIM_SECONDS = 600.0  # a run claimed from another host, not renewed for this long, is free


def _claim(text: str) -> dict | None:
    try:
        claim = json.loads(text)
        return claim if {"host", "pid", "time"} <= set(claim) else None
    except (ValueError, TypeError):
        return None


def _claim_alive(claim: dict) -> bool:
    """Whether the process that claimed a run may still run it."""
    if claim["host"] != socket.gethostname():
        return time.time() - float(claim["time"]) < CLAIM_SECONDS
    try:
        os.kill(int(claim["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLog:
    """Runs, their tuning curves (model and per kernel), run claims and meta values."""

    def get_meta(self, key: str) -> str | None:
        """A value kept with the library (``set_meta``), or None."""
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str | None) -> None:
        """Keep ``value`` under ``key`` with the library (None: remove the key)."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM meta WHERE key = ?", (key,))
            if value is not None:
                cur.execute("INSERT INTO meta VALUES (?, ?)", (key, value))

    def start_run(self, run_id: str, kind: str, model: str | None, target: str, params: dict):
        with self.transaction() as cur:
            cur.execute(
                "INSERT OR IGNORE INTO runs (run_id, kind, model, target, params, started) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, kind, model, target, json.dumps(params), time.time()),
            )

    def claim_run(self, run_id: str) -> None:
        """Mark ``run_id`` as run by this process (again: renew the claim). A ``LibraryError``
        if another process runs it: a live one on this host, or on another host one that
        renewed its claim in the last ``CLAIM_SECONDS``. Released by :meth:`release_run`."""
        key, me = f"claim:{run_id}", {"host": socket.gethostname(), "pid": os.getpid()}
        with self.transaction() as cur:
            row = cur.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            other = _claim(row[0]) if row else None
            if other and {k: other[k] for k in me} != me and _claim_alive(other):
                raise LibraryError(
                    f"{self.path}: {run_id} is being run by process {other['pid']} on "
                    f"{other['host']}; wait for it to end, or stop it"
                )
            cur.execute("DELETE FROM meta WHERE key = ?", (key,))
            claim = json.dumps({**me, "time": time.time()})
            cur.execute("INSERT INTO meta VALUES (?, ?)", (key, claim))

    def release_run(self, run_id: str) -> None:
        with self.transaction() as cur:
            cur.execute("DELETE FROM meta WHERE key = ?", (f"claim:{run_id}",))

    def finish_run(self, run_id: str) -> None:
        with self.transaction() as cur:
            cur.execute("UPDATE runs SET finished = ? WHERE run_id = ?", (time.time(), run_id))

    def add_curve_point(self, run_id: str, trials: int, seconds: float, latency: float) -> None:
        with self.transaction() as cur:
            cur.execute("INSERT INTO curve VALUES (?, ?, ?, ?)", (run_id, trials, seconds, latency))

    def add_kernel_point(self, run_id: str, workload_id: int, trials: int, best: float) -> None:
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO kernel_curve VALUES (?, ?, ?, ?)", (run_id, workload_id, trials, best)
            )

    def kernel_curves(self, run_id: str) -> dict[int, list[tuple[int, float]]]:
        """Per workload, the (trials, best seconds) points a run recorded, in order (none in a
        library written before kernel curves were kept, opened read-only)."""
        out: dict[int, list[tuple[int, float]]] = {}
        if "kernel_curve" not in {name for (name,) in self._query(self._backend.TABLES)}:
            return out
        for wid, trials, best in self._query(
            "SELECT workload_id, trials, best FROM kernel_curve WHERE run_id = ? ORDER BY trials",
            (run_id,),
        ):
            out.setdefault(wid, []).append((trials, best))
        return out

    def tune_run(self, model: str) -> str | None:
        """The id of ``model``'s (first) tuning run in this library, or None."""
        rows = self._query(
            "SELECT run_id FROM runs WHERE kind = 'tune' AND model = ? ORDER BY started", (model,)
        )
        return rows[0][0] if rows else None

    def forget_model(self, model: str) -> None:
        """Drop ``model``'s list of kernels (its workloads, records and runs stay): what the
        next tuning of it registers becomes its list, e.g. after a lowering changed them."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM workload_models WHERE model = ?", (model,))

    def model_weights(self, model: str) -> dict[int, int]:
        """Workload id -> weight (occurrences) of every kernel of ``model``."""
        sql = "SELECT workload_id, weight FROM workload_models WHERE model = ?"
        return dict(self._query(sql, (model,)))

    def curve(self, run_id: str) -> list[tuple[int, float, float]]:
        """(trials, seconds, estimated latency) points of a run, in order."""
        return self._query(
            "SELECT trials, seconds, latency FROM curve WHERE run_id = ? ORDER BY seconds",
            (run_id,),
        )
