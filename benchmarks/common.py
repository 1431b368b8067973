"""What every benchmark records with its figures: the run's metadata, and the project's
``docs/results/summary.json`` (one JSON object; each benchmark merges the keys its issue
names, plus ``"<area>.meta"``)."""

from __future__ import annotations

import json
import subprocess
import time
from importlib import metadata
from pathlib import Path

from transtune.files import write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "docs" / "results" / "summary.json"
PACKAGES = ("apache-tvm", "apache-tvm-ffi", "torch", "onnxruntime", "xgboost-cpu", "pyarrow")


def run_meta(threads: int | None = None) -> dict:
    """Commit, date, CPU (model name, LLVM CPU, hardware id of ``host``), threads, versions."""
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
        "cpu": host.cpu_model, "mcpu": host.mcpu, "hardware_id": get_config("host").name,
        "threads": threads if threads is not None else host.cores, "versions": versions,
    }  # fmt: skip


def merge_summary(area: str, figures: dict, threads: int | None = None) -> dict:
    """Merge ``figures`` (measured in this run) and ``"<area>.meta"`` into summary.json."""
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.is_file() else {}
    summary.update(figures)
    summary[f"{area}.meta"] = run_meta(threads)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(SUMMARY, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary
