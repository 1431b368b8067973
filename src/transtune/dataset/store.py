"""On-disk layout of a dataset directory (Parquet, one folder per table, partitioned by target).

::

    DIR/dataset.json                      format version, evaluator, seed, sampling target
    DIR/hardware/part-*.parquet           one row per hardware id (descriptor, fingerprint)
    DIR/workloads/part-*.parquet          one row per kernel: class, FLOPs, IRModule, models
    DIR/occurrences/part-*.parquet        (kernel, model tag, weight) seen by later collections
    DIR/spaces/part-*.parquet             design-space instructions, once per (kernel, space)
    DIR/records/target=ID/part-*.parquet  one row per measured schedule: its decisions only
                                          (ID: the hardware id, ``epyc-znver4-2c``)
    DIR/features/part-*.parquet           per-store program features (regenerable)

Every part file is written to a temporary name, flushed to disk and renamed, so a killed
collection leaves only whole files. Compaction writes the merged file with the names of the
parts it replaces in its Parquet metadata before it deletes them: a reader ignores a part that
a compacted file replaces, so a kill between the rename and the deletes duplicates nothing,
and the next compaction deletes the leftovers. Reading skips (and reports) a file that is not
valid Parquet or lacks columns, and rows whose values make no sense, instead of failing.
"""

from __future__ import annotations

import fcntl
import json
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import TranstuneError
from ..files import replace_durably, write_text_atomic

REPLACES = b"transtune.replaces"  # Parquet metadata key: the part files a compacted file holds
FORMAT_VERSION = 2  # 2: partitions and descriptors keyed by hardware id, with fingerprints
STATUSES = ("ok", "build_error", "run_error", "timeout", "rejected")
# Where a record's program came from: sampled at random from the kernel's design space, or
# visited by MetaSchedule's evolutionary search (its cost model learning online). Files
# written before the column existed hold random samples only.
SOURCES = ("random", "trajectory")

SCHEMAS = {
    "hardware": pa.schema(
        [("id", pa.string()), ("config", pa.string()), ("target", pa.string()),
         ("descriptor", pa.string())]
    ),
    "workloads": pa.schema(
        [("workload", pa.string()), ("kernel_class", pa.string()), ("flops", pa.float64()),
         ("mod", pa.string()), ("models", pa.list_(pa.string())),
         ("weights", pa.list_(pa.int32()))]
    ),
    "occurrences": pa.schema(
        [("workload", pa.string()), ("model", pa.string()), ("weight", pa.int32())]
    ),
    "spaces": pa.schema(
        [("workload", pa.string()), ("space", pa.int16()), ("insts", pa.string())]
    ),
    "records": pa.schema(
        [("workload", pa.string()), ("sample", pa.int32()), ("space", pa.int16()),
         ("decisions", pa.string()), ("run_secs", pa.list_(pa.float32())),
         ("mean_secs", pa.float32()), ("status", pa.string()), ("error", pa.string()),
         ("collected", pa.float64()), ("source", pa.string())]
    ),
    "features": pa.schema(
        [("workload", pa.string()), ("sample", pa.int32()), ("n_stores", pa.int32()),
         ("values", pa.list_(pa.float32()))]
    ),
}  # fmt: skip


class DatasetError(TranstuneError):
    """A directory that is not a dataset, or one of another format version."""


@dataclass
class ReadReport:
    """Files and rows a read skipped, with the reason."""

    skipped_files: list[tuple[str, str]] = field(default_factory=list)
    skipped_rows: int = 0

    def summary(self) -> str:
        parts = []
        if self.skipped_files:
            names = ", ".join(f"{Path(f).name} ({why})" for f, why in self.skipped_files[:5])
            parts.append(f"skipped {len(self.skipped_files)} unreadable files: {names}")
        if self.skipped_rows:
            parts.append(f"skipped {self.skipped_rows} invalid rows")
        return "; ".join(parts) or "nothing skipped"


class DatasetStore:
    """A dataset directory; created (with ``dataset.json``) when ``create`` is true."""

    def __init__(self, path: str | Path, create: bool = False, meta: dict | None = None) -> None:
        self.path = Path(path)
        manifest = self.path / "dataset.json"
        if not manifest.is_file():
            if not create:
                raise DatasetError(f"{self.path} is not a transtune dataset (no dataset.json)")
            self.path.mkdir(parents=True, exist_ok=True)
            write_text_atomic(manifest, json.dumps({"format": FORMAT_VERSION, **(meta or {})}))
        try:
            self.meta = json.loads(manifest.read_text())
        except (OSError, ValueError) as err:
            raise DatasetError(f"{manifest} is damaged: {err}") from None
        if not isinstance(self.meta, dict):
            raise DatasetError(f"{manifest} is damaged: not a JSON object")
        if self.meta.get("format") == 1:
            raise DatasetError(
                f"{self.path}: dataset format 1 (configurations named by alias); run "
                f"`transtune dataset migrate {self.path}` once"
            )
        if self.meta.get("format") != FORMAT_VERSION:
            raise DatasetError(
                f"{self.path}: dataset format {self.meta.get('format')}, this transtune reads "
                f"format {FORMAT_VERSION}"
            )

    def write(self, table: str, rows: list[dict], target: str | None = None) -> Path | None:
        """Append ``rows`` to ``table`` (in ``target``'s partition for records) as one file."""
        if not rows:
            return None
        folder = self._folder(table, target)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"part-{time.time_ns():x}-{uuid.uuid4().hex[:6]}.parquet"
        _write_parquet(pa.Table.from_pylist(rows, SCHEMAS[table]), path)
        return path

    def _folder(self, table: str, target: str | None) -> Path:
        if table == "records":
            if not target:
                raise ValueError("records are written per target")
            return self.path / "records" / f"target={target}"
        return self.path / table

    def targets(self) -> list[str]:
        return sorted(p.name.split("=", 1)[1] for p in (self.path / "records").glob("target=*"))

    def files(self, table: str, target: str | None = None) -> list[Path]:
        """The live part files of ``table``: those no compacted file replaces."""
        folders = (
            [self._folder(table, t) for t in ([target] if target else self.targets())]
            if table == "records"
            else [self._folder(table, None)]
        )
        return [p for folder in folders for p in _live_parts(folder)]

    def read(
        self,
        table: str,
        columns: list[str] | None = None,
        target: str | None = None,
        report: ReadReport | None = None,
    ) -> pa.Table:
        """``table`` (only ``columns``; records of one ``target`` or of all, with a ``target``
        column), skipping unreadable files and invalid rows into ``report``."""
        report = report if report is not None else ReadReport()
        schema = SCHEMAS[table]
        wanted = columns or schema.names
        pieces = []
        for path in self.files(table, target):
            try:  # a value that does not fit its column's type skips the file, not wraps
                piece = _read_part(path, table, wanted)
                piece = piece.cast(pa.schema([schema.field(c) for c in wanted]), safe=True)
            except Exception as err:  # ArrowInvalid, OSError, missing columns, overflow ...
                report.skipped_files.append((str(path), str(err).splitlines()[0][:120]))
                continue
            if table == "records":
                piece = _valid_records(piece, report)
                name = path.parent.name.split("=", 1)[1]
                piece = piece.append_column("target", pa.array([name] * len(piece), pa.string()))
            pieces.append(piece)
        if not pieces:
            names = [*wanted, "target"] if table == "records" else wanted
            fields = [schema.field(c) if c in schema.names else pa.field(c, pa.string())
                      for c in names]  # fmt: skip
            return pa.schema(fields).empty_table()
        return pa.concat_tables(pieces)

    def hardware(self) -> dict[str, dict]:
        """Descriptors (as dicts) by hardware id."""
        table = self.read("hardware", ["id", "descriptor"]).to_pydict()
        return {i: json.loads(d) for i, d in zip(table["id"], table["descriptor"], strict=True)}

    def check_hardware(self, hw_id: str, fingerprint: dict) -> bool:
        """Whether ``hw_id`` is described here already; a ``DatasetError`` if it is, with a
        different fingerprint (another CPU filed under that id)."""
        stored = self.hardware().get(hw_id)
        if stored is None:
            return False
        if stored.get("fingerprint") != fingerprint:
            from ..machine import fingerprint_difference

            diff = fingerprint_difference(stored.get("fingerprint") or {}, fingerprint)
            raise DatasetError(
                f"{self.path}: hardware id {hw_id!r} is another CPU in this dataset ({diff}); "
                "refusing to mix their records"
            )
        return True

    def update_meta(self, **values) -> None:
        """Add ``values`` to ``dataset.json`` (atomically)."""
        self.meta.update(values)
        write_text_atomic(self.path / "dataset.json", json.dumps(self.meta))

    def occurrences(self) -> dict[str, dict[str, int]]:
        """Model tags (``"resnet18@b4"``) each kernel occurs in, with its weight there: those
        recorded with the kernel plus those added by later collections."""
        found: dict[str, dict[str, int]] = {}
        wl = self.read("workloads", ["workload", "models", "weights"]).to_pydict()
        for w, models, weights in zip(*wl.values(), strict=True):
            found.setdefault(w, {}).update(zip(models, weights, strict=True))
        for w, model, weight in zip(*self.read("occurrences").to_pydict().values(), strict=True):
            found.setdefault(w, {})[model] = weight
        return found

    def compact(self) -> int:
        """Merge every table's (and partition's) part files into one; returns files removed.
        One compaction at a time (a lock file); a part that cannot be read as its table is
        left in place (and reported by ``read``). Temporary files of killed writers (older
        than ``STALE_TMP_SECONDS``) are deleted."""
        removed = 0
        folders = [self._folder(t, None) for t in SCHEMAS if t != "records"]
        folders += [self._folder("records", t) for t in self.targets()]
        with self._lock():
            for folder in folders:
                table = folder.parent.name if folder.name.startswith("target=") else folder.name
                removed += _compact_folder(folder, table)
        return removed

    @contextmanager
    def _lock(self):
        with open(self.path / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


STALE_TMP_SECONDS = 3600  # a part's temporary file this old was left by a killed writer


def _compact_folder(folder: Path, table: str) -> int:
    schema = SCHEMAS[table]
    for tmp in folder.glob("part-*.tmp"):
        try:
            if time.time() - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                tmp.unlink()
        except FileNotFoundError:
            continue
    parts = sorted(folder.glob("part-*.parquet"))
    live = set(_live_parts(folder))
    stale = [p for p in parts if p not in live]  # replaced by a compacted file already
    readable = []
    for p in sorted(live):
        try:
            readable.append((p, _read_part(p, table, schema.names).cast(schema)))
        except Exception:
            continue  # left in place, reported by read()
    if len(readable) > 1:
        merged = pa.concat_tables([t for _, t in readable])
        names = json.dumps([p.name for p, _ in readable]).encode()
        merged = merged.replace_schema_metadata({REPLACES: names})
        _write_parquet(merged, folder / f"part-{time.time_ns():x}-compact.parquet")
        stale += [p for p, _ in readable]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def _live_parts(folder: Path) -> list[Path]:
    """Part files of ``folder`` but those a compacted file there replaces."""
    parts = sorted(folder.glob("part-*.parquet"))
    replaced: set[str] = set()
    for p in parts:
        if p.name.endswith("-compact.parquet"):
            try:
                meta = pq.read_schema(p).metadata or {}
            except Exception:
                continue
            replaced.update(json.loads(meta.get(REPLACES, b"[]")))
    return [p for p in parts if p.name not in replaced]


def _write_parquet(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` whole or not at all: temporary name, fsync, rename."""
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, compression="zstd")
    replace_durably(tmp, path)


def _read_part(path: Path, table: str, columns: list[str]) -> pa.Table:
    """``columns`` of one part file; a record file from before the ``source`` column holds
    random samples (and so does a row whose ``source`` is null)."""
    if table != "records" or "source" not in columns:
        return pq.read_table(path, columns=columns)
    if "source" not in pq.read_schema(path).names:
        piece = pq.read_table(path, columns=[c for c in columns if c != "source"])
        piece = piece.append_column("source", pa.array(["random"] * len(piece), pa.string()))
        return piece.select(columns)
    piece = pq.read_table(path, columns=columns)
    at = piece.column_names.index("source")
    return piece.set_column(at, "source", pc.fill_null(piece["source"], "random"))


def _valid_records(table: pa.Table, report: ReadReport) -> pa.Table:
    """Rows with a known status and, for ``ok`` rows, a positive finite mean."""
    if "status" not in table.column_names:
        return table
    ok_status = pc.is_in(table["status"], pa.array(STATUSES))
    keep = pc.fill_null(ok_status, False)
    if "mean_secs" in table.column_names:
        mean = table["mean_secs"]
        good_mean = pc.and_(pc.greater(mean, 0.0), pc.less(mean, 1e9))
        keep = pc.and_(
            keep, pc.or_(pc.not_equal(table["status"], "ok"), pc.fill_null(good_mean, False))
        )
    keep = pc.fill_null(keep, False)
    report.skipped_rows += len(table) - pc.sum(keep).as_py() if len(table) else 0
    return table.filter(keep)
