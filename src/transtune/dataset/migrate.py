"""Upgrade a format-1 dataset (partitions named by alias) to format 2 (by hardware id).

Format 1 named record partitions and descriptors by configuration alias (``target=host``,
``host@vm``), which means another CPU on every machine. Migration is told which CPU the data
was measured on (``cpu``: :meth:`transtune.machine.HostInfo.cpu` of that machine; this host's
by default), renames each partition to its hardware id, rewrites the descriptors with the id
and fingerprint, records the sampling seed and target in ``dataset.json`` and only then marks
the format 2. Every step can be repeated, so a migration killed at any point is finished by
running it again. Nothing is re-measured; ``redescribe`` re-measures the descriptors'
bandwidth and peak (allowed only on the CPU itself).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..files import write_text_atomic
from ..targets import foreign_cpu, hardware_for, host_configs
from .store import FORMAT_VERSION, DatasetError, DatasetStore


def migrate_dataset(path: str | Path, cpu: dict, redescribe: bool = False) -> dict[str, str]:
    """Migrate the dataset at ``path`` in place; returns {old partition: hardware id} (empty
    if it is at format 2 already)."""
    path = Path(path)
    manifest = path / "dataset.json"
    if not manifest.is_file():
        raise DatasetError(f"{path} is not a transtune dataset (no dataset.json)")
    meta = json.loads(manifest.read_text())
    if meta.get("format") == FORMAT_VERSION:
        return {}
    if meta.get("format") != 1:
        raise DatasetError(f"{path}: cannot migrate dataset format {meta.get('format')}")
    store = DatasetStore.__new__(DatasetStore)
    store.path, store.meta = path, meta
    rows = store.read("hardware").to_pylist()
    renamed: dict[str, str] = {}
    new_rows: dict[str, dict] = {}
    for row in rows:
        spec = json.loads(row["target"])
        descriptor = json.loads(row["descriptor"])
        if descriptor.get("fingerprint"):  # migrated by an earlier, interrupted run
            new_rows[row["id"]] = row
            renamed[row["config"]] = row["id"]
            continue
        problem = foreign_cpu(spec, cpu)
        if problem:
            raise DatasetError(f"{path}: {problem}")
        hw_id, fp = hardware_for(cpu, spec)
        descriptor.update(id=hw_id, config=row["config"], device=cpu["model_name"], fingerprint=fp)
        renamed[row["config"]] = hw_id
        new_rows[hw_id] = {**row, "id": hw_id, "descriptor": json.dumps(descriptor)}
    if redescribe:
        _redescribe(new_rows)
    records = path / "records"
    for old, new in renamed.items():
        _move_partition(records / f"target={old}", records / f"target={new}")
    old_parts = store.files("hardware")
    store.write("hardware", list(new_rows.values()))
    for p in old_parts:
        p.unlink()
    sampling = {"seed": meta.pop("seed", 0), "target": _sampling_target(rows)}
    meta.update(format=FORMAT_VERSION, sampling=meta.get("sampling", sampling),
                migrated_from={"format": 1, "cpu": cpu})  # fmt: skip
    write_text_atomic(manifest, json.dumps(meta))
    return renamed


def _sampling_target(rows: list[dict]) -> dict | None:
    """The target a format-1 collection sampled from: its full-ISA, all-core configuration
    (format 1 did not record it; every shipped pass listed ``host`` first)."""
    for row in rows:
        if row["config"] == "host":
            return json.loads(row["target"])
    return None


def _move_partition(old: Path, new: Path) -> None:
    if not old.is_dir():
        return
    if not new.exists():
        os.replace(old, new)
        return
    for part in old.iterdir():  # a rename that an earlier run began
        os.replace(part, new / part.name)
    old.rmdir()


def _redescribe(rows: dict[str, dict]) -> None:
    """Re-measure bandwidth and peak of each configuration, on the CPU it is described as."""
    from ..hardware import describe

    configs = {c.name: c for c in host_configs().values()}
    for hw_id, row in rows.items():
        stored = json.loads(row["descriptor"])
        config = configs.get(hw_id)
        if config is None or config.fingerprint != stored["fingerprint"]:
            raise DatasetError(f"{hw_id} is not a configuration of this host: cannot re-measure")
        fresh = describe(config)
        d = {**stored, "measured_bandwidth_gbs": fresh.measured_bandwidth_gbs,
             "measured_peak_gflops": fresh.measured_peak_gflops}  # fmt: skip
        rows[hw_id] = {**row, "descriptor": json.dumps(d)}
