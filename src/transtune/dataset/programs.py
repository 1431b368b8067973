"""The programs a collection measures besides fresh random samples: those stored in the
dataset (another partition's, for ``--programs-from``; a kernel's search trajectory on a
resume) and those MetaSchedule's evolutionary search visits on a kernel (its trajectory).

A program is (sample index, design space, decisions); trajectory programs have sample indices
from :data:`TRAJECTORY_BASE` on, and their instruction lists (the search simplifies its design
spaces' traces) are stored as further spaces of the kernel.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from ..schedules import Sample, rebuild, strip_postproc
from .store import DatasetError, DatasetStore

log = logging.getLogger(__name__)

TRAJECTORY_BASE = 1 << 20  # sample indices of search-trajectory programs start here
TRAJECTORY_BATCH = 16  # candidates per round of a trajectory's search


def stored_programs(store: DatasetStore, source: str) -> tuple[dict, dict]:
    """(:func:`programs`, :func:`space_texts`) of the records measured on hardware id
    ``source``."""
    if source not in store.targets():
        raise DatasetError(f"{store.path} holds no records of {source!r} to take programs from")
    return programs(store, source), space_texts(store)


def programs(store: DatasetStore, partition: str, source: str | None = None) -> dict:
    """{workload: [(sample, space, decisions)] by sample} of the records in ``partition``
    (only those of ``source``, ``random`` or ``trajectory``, when given)."""
    if partition not in store.targets():
        return {}
    names = ["workload", "sample", "space", "decisions", "source"]
    table = store.read("records", names, partition)
    by_sample: dict[str, dict[int, tuple]] = {}
    for w, s, space, d, src in zip(*(table[c].to_pylist() for c in names), strict=True):
        if source is None or src == source:
            by_sample.setdefault(w, {})[s] = (s, space, d)
    return {w: [p[s] for s in sorted(p)] for w, p in by_sample.items()}


def space_texts(store: DatasetStore) -> dict[tuple[str, int], str]:
    """{(workload, space): instruction list JSON} of every stored design space."""
    spaces = store.read("spaces").to_pydict()
    return {(w, i): t for w, i, t in zip(*spaces.values(), strict=True)}


def trajectory_of(
    store: DatasetStore, kernel, config, count: int, seed: int, builder, runner,
    visited: dict, texts: dict, timed: dict | None = None,
) -> list[tuple] | None:  # fmt: skip
    """Search ``kernel`` (``count`` trials on ``config``, MetaSchedule's evolutionary search
    and its online XGBoost model, seeded by ``seed``) unless ``visited`` has its programs
    already; adds them there (sample, space, decisions) and any new instruction list to the
    kernel's spaces (in ``texts`` and the store), and to ``timed`` {sample: run_secs} the
    search's own successful measurements (by ``runner``). None when interrupted."""
    from ..library import open_library
    from ..tuning import tune_kernels

    w = kernel.workload_hash
    if w in visited:
        return visited[w]
    with tempfile.TemporaryDirectory(prefix="transtune-search-") as tmp:
        with open_library(Path(tmp) / "search.db") as lib:
            try:
                result = tune_kernels(
                    [kernel], lib, config, "trajectory", trials=count, seed=seed % (1 << 31),
                    num_trials_per_iter=min(count, TRAJECTORY_BATCH), builder=builder,
                    runner=runner,
                )  # fmt: skip
            except RuntimeError as err:  # the untuned kernel did not run: no search to follow
                log.warning("%s: no search trajectory: %s", kernel.name, err)
                visited[w] = []
                return []
            if result.stopped == "interrupted":
                return None
            records = sorted(lib.records(), key=lambda r: r.id)
    ids = {t: i for (ww, i), t in texts.items() if ww == w}
    new, found = [], []
    for j, record in enumerate(records):
        if timed is not None and record.ok:
            timed[TRAJECTORY_BASE + j] = list(record.run_secs)
        insts, decisions = strip_postproc(record.trace)
        text = json.dumps(insts, separators=(",", ":"))
        if text not in ids:
            ids[text] = max(ids.values(), default=-1) + 1
            texts[w, ids[text]] = text
            new.append({"workload": w, "space": ids[text], "insts": text})
        found.append((TRAJECTORY_BASE + j, ids[text], json.dumps(decisions, separators=(",", ":"))))
    store.write("spaces", new)  # before any record that names them
    visited[w] = found
    return found


def rebuilt(
    kernel, stored: tuple[dict, dict], postprocs: list, per_kernel: int, trajectory: int = 0
) -> tuple[list[Sample], int]:
    """The first ``per_kernel`` random programs of ``kernel`` in ``stored`` (:func:`programs`,
    :func:`space_texts`) and its first ``trajectory`` search programs, rebuilt for this
    target, and how many no longer apply to it."""
    found, insts = stored
    mine = found.get(kernel.workload_hash, [])
    drawn = [p for p in mine if p[0] < TRAJECTORY_BASE][:per_kernel]
    searched = [p for p in mine if p[0] >= TRAJECTORY_BASE][:trajectory]
    out, failed = [], 0
    for index, space, decisions in drawn + searched:
        text = insts.get((kernel.workload_hash, space))
        sch = rebuild(kernel.mod, text, decisions, postprocs) if text else None
        if sch is None:
            failed += 1
            continue
        out.append(Sample(index, space, decisions, sch))
    return out, failed
