"""What every benchmark records with its figures: the run's metadata, in every result file
(:func:`write_result`) and in the project's ``docs/results/summary.json`` (one JSON object;
each benchmark merges the keys its issue names, plus ``"<area>.meta"``); and the sentences
that state it on a page rendered from those files (:func:`meta_line`, :func:`meta_lines`),
never from the machine that renders the page."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

from transtune.files import write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "docs" / "results" / "summary.json"
# The shipped schedule library (``make demo`` copies it): the best records of every CPU's
# references (``reference.py``), merged in by ``transfer.py library``.
SHIPPED = ROOT / "data" / "library" / "zoo-host.db"
# The shipped cost model (``make demo`` guides with it), trained by ``guided.py train``.
CHECKPOINT = ROOT / "data" / "costmodel" / "attention-by-model.json"
VALIDATION = 0.1  # share of the training kernels our networks pick their epoch on
PACKAGES = ("apache-tvm", "apache-tvm-ffi", "torch", "onnxruntime", "xgboost-cpu", "pyarrow")


def run_meta(threads: int | None = None) -> dict:
    """Commit, date, CPU (model name, LLVM CPU, hardware id of ``host``, or of ``host-1core``
    for one thread), threads, versions."""
    from transtune.machine import host_info
    from transtune.targets import get_config

    host = host_info()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "commit": commit + ("+changes" if dirty else ""),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "cpu": host.cpu_model, "mcpu": host.mcpu,
        "hardware_id": get_config("host-1core" if threads == 1 else "host").name,
        "threads": threads if threads is not None else host.cores, "versions": versions,
    }  # fmt: skip


def merge_summary(
    area: str, figures: dict, threads: int | None = None, meta: dict | None = None
) -> dict:
    """Merge ``figures`` (measured in this run) and ``"<area>.meta"`` into summary.json; a
    report that only rewrites the figures already there keeps the meta of their measurement.
    ``meta``: the measurement's own (result files'), when a report renders figures measured
    by earlier runs, possibly on another CPU."""
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    if meta is not None:  # the measurement's own: it holds whether or not a figure changed
        summary[f"{area}.meta"] = meta
    elif any(summary.get(k) != v for k, v in figures.items()) or f"{area}.meta" not in summary:
        summary[f"{area}.meta"] = run_meta(threads)
    summary.update(figures)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(SUMMARY, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


def write_result(path: str | Path, data: dict, threads: int | None = None) -> dict:
    """Write ``data`` and this run's metadata (``"meta"``: :func:`run_meta`) to ``path`` as
    indented JSON, whole or not at all; returns what was written. A ``"meta"`` that ``data``
    has already (the caller's own, e.g. the latest of per-repeat ones) is kept as it is."""
    result = {**data} if "meta" in data else {**data, "meta": run_meta(threads)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result, indent=1) + "\n")
    return result


def file_meta(data: dict) -> dict | None:
    """A result file's ``"meta"``; for one written before files carried it, the part that a
    :mod:`transtune.benchmark` result in it (at its top or one level down) kept: CPU, LLVM
    CPU, threads, versions. None when it has neither."""
    if data.get("meta"):
        return data["meta"]
    for d in (data, *(v for v in data.values() if isinstance(v, dict))):
        if isinstance(d.get("host"), dict):
            host = d["host"]
            return {"cpu": host.get("cpu"), "mcpu": host.get("mcpu"),
                    "threads": d.get("num_threads"), "versions": d.get("versions", {})}  # fmt: skip
    return None


def meta_line(meta: dict | None) -> str:
    """One Markdown sentence stating a result's stored metadata (what :func:`run_meta` kept
    when it was measured), for a page rendered from it; fields it lacks are left out."""
    if not meta:
        return ("The CPU, commit and package versions of this run were not recorded in its "
                "result file (written before result files carried run metadata), so this page "
                "cannot state them.")  # fmt: skip
    ids = [f"LLVM `{meta['mcpu']}`"] if meta.get("mcpu") else []
    ids += [f"hardware id `{meta['hardware_id']}`"] if meta.get("hardware_id") else []
    parts = [f"Measured on {meta.get('cpu') or 'an unrecorded CPU'}"
             + (f" ({', '.join(ids)})" if ids else "")]  # fmt: skip
    threads = meta.get("threads")
    if threads:
        parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
    parts.append(f"commit {meta['commit']}" if meta.get("commit") else "commit not recorded")
    if meta.get("date"):
        parts.append(meta["date"])
    versions = ", ".join(f"{name} {v}" for name, v in (meta.get("versions") or {}).items())
    return ", ".join(parts) + (f"; {versions}" if versions else "") + "."


def meta_lines(labelled: dict[str, dict | None], what: str = "") -> list[str]:
    """Markdown lines stating the stored metadata of several results (label -> meta): one
    sentence where they all agree, else one bullet per distinct metadata, naming its results.
    ``what`` (e.g. "Load figures") leads them; nothing for no results."""
    groups: dict[str, tuple[dict | None, list[str]]] = {}
    for label, meta in labelled.items():
        key = json.dumps(meta or None, sort_keys=True)
        groups.setdefault(key, (meta, []))[1].append(label)
    if len(groups) <= 1:
        lead = f"{what}: " if what else ""
        return [lead + meta_line(meta) for meta, _ in groups.values()]
    return [f"{what}, by result:" if what else "By result:", *(
        f"- {', '.join(labels)}: {meta_line(meta)}" for meta, labels in groups.values()
    )]  # fmt: skip


def time_to_reach(curve: list, latency: float) -> float | None:
    """Seconds a tuning curve of (trials, seconds, estimated latency) points needs to reach
    ``latency`` (None: never)."""
    return next((seconds for _, seconds, est in curve if est <= latency), None)


def step_meta_lines(steps: list[tuple[str, dict | None]], fallback: dict | None) -> list[str]:
    """Where the steps of a resumable run were computed (a run that spans sessions may span
    machines): ``steps`` holds (group label, the step's metadata as :class:`resume.Steps`
    kept it) per step; each group's steps computed alike are counted. ``fallback`` (the
    result's own metadata) where no step kept any."""
    if not any(meta for _, meta in steps):
        return [meta_line(fallback)]
    counts = Counter((label, json.dumps(meta, sort_keys=True)) for label, meta in steps)
    labelled = {f"{label} ({n} step{'s' if n != 1 else ''})": json.loads(meta)
                for (label, meta), n in counts.items()}  # fmt: skip
    return meta_lines(labelled, "Training and scoring")
