"""The schedule library: target-aware records, concurrency, JSON import/export."""

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tvm import te
from tvm.s_tir import meta_schedule as ms

from transtune.cli import main
from transtune.library import LibraryError, open_library, target_key
from transtune.library.database import LibraryDatabase, export_json, import_json
from transtune.measure import load_cpu_tensor_intrinsics, warm_builder
from transtune.targets import get_config


def matmul(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ms.tune_context._normalize_mod(te.create_prim_func([a, b, c]))


@pytest.fixture(scope="module")
def tuned_work_dir(tmp_path_factory):
    """A real MetaSchedule JSON work dir: tune_tir, a few trials of a tiny matmul."""
    load_cpu_tensor_intrinsics()
    work_dir = tmp_path_factory.mktemp("ms")
    with warm_builder() as builder:
        ms.tune_tir(
            matmul(32), get_config("host").tvm_target(), str(work_dir),
            max_trials_global=8, num_trials_per_iter=8, seed=0, builder=builder,
        )  # fmt: skip
    return work_dir


def test_records_are_keyed_by_target(library_url):
    host, avx2 = get_config("host").tvm_target(), get_config("host-avx2").tvm_target()
    with open_library(library_url) as lib:
        wid = lib.add_workload(matmul(16), "matmul", 2 * 16**3, model="m", weight=3)
        assert lib.add_workload(matmul(16)) == wid  # structurally equal -> same workload
        assert lib.add_workload(matmul(8)) != wid
        lib.add_record(wid, host, [[], []], [2e-3], provenance="tuned")
        lib.add_record(wid, host, [[], []], [1e-3], provenance="tuned")
        lib.add_record(wid, avx2, [[], []], [5e-4], provenance="tuned")
        lib.add_record(wid, host, [[], []], [], provenance="tuned")  # failed
        best = lib.records(wid, host, top_k=1, ok_only=True)
        assert [r.mean_secs for r in best] == [1e-3]
        assert lib.count_records(wid, host) == 3
        assert lib.count_records(wid, avx2) == 1
        info = lib.info()
        assert info["records"] == 4 and info["failed_records"] == 1 and info["models"] == ["m"]


def test_forgetting_a_model_drops_its_kernel_list_only(library_url):
    host = get_config("host").tvm_target()
    with open_library(library_url) as lib:
        old = lib.add_workload(matmul(16), "matmul", model="m", weight=3)
        lib.add_workload(matmul(8), "matmul", model="other")
        lib.add_record(old, host, [[], []], [1e-3])
        lib.forget_model("m")
        assert lib.model_weights("m") == {} and lib.model_weights("other")
        assert lib.count_records(old, host) == 1  # its workload and records stay
        new = lib.add_workload(matmul(4), "matmul", model="m", weight=2)  # a new lowering's
        assert lib.model_weights("m") == {new: 2}


def test_py_database_view_only_sees_its_target(library_url):
    host, avx2 = get_config("host").tvm_target(), get_config("host-avx2").tvm_target()
    with open_library(library_url) as lib:
        wid = lib.add_workload(matmul(16))
        lib.add_record(wid, avx2, [[], []], [1e-4])
        db = LibraryDatabase(lib, host)
        assert db.has_workload(matmul(16))
        assert db.query_tuning_record(matmul(16), host, "main") is None
        assert len(db) == 0
        db_avx2 = LibraryDatabase(lib, avx2)
        assert db_avx2.query_tuning_record(matmul(16), avx2, "main") is not None


def test_json_round_trip(tuned_work_dir, tmp_path, library_url):
    with open_library(library_url) as lib:
        report = import_json(lib, tuned_work_dir, model="mm")
        assert report.skipped == [] and report.records == 8 and report.workloads == 1
        again = import_json(lib, tuned_work_dir, model="mm")  # idempotent
        assert (again.records, again.duplicates, lib.count_records()) == (0, 8, 8)
        exported = export_json(lib, tmp_path / "out")
        assert exported == 8
        before = sorted((json.dumps(r.trace), r.run_secs, r.target_key) for r in lib.records())
    # The export reads back with MetaSchedule's own JSONDatabase and into a new library.
    stock = ms.database.JSONDatabase(work_dir=str(tmp_path / "out"), allow_missing=False)
    assert len(stock.get_all_tuning_records()) == 8
    with open_library(tmp_path / "b.db") as lib:
        assert import_json(lib, tmp_path / "out").records == 8
        after = sorted((json.dumps(r.trace), r.run_secs, r.target_key) for r in lib.records())
    assert after == before


def test_corrupt_and_foreign_lines_are_skipped_and_reported(tuned_work_dir, tmp_path):
    work = tmp_path / "bad"
    work.mkdir()
    workloads = (tuned_work_dir / "database_workload.json").read_text().splitlines()
    records = (tuned_work_dir / "database_tuning_record.json").read_text().splitlines()
    (work / "database_workload.json").write_text("\n".join([*workloads, "[1, 2"]) + "\n")
    bad_target = json.loads(records[1])
    bad_target[1][2] = {"kind": "no-such-kind"}
    lines = [
        records[0],
        "{not json",
        json.dumps(bad_target),
        '[7, [[], [1.0], {"kind": "llvm"}, []]]',
    ]
    (work / "database_tuning_record.json").write_text("\n".join([*lines, *records[2:]]) + "\n")
    with open_library(tmp_path / "lib.db") as lib:
        report = import_json(lib, work)
    assert report.records == len(records) - 1
    assert [(f, n) for f, n, _ in report.skipped] == [
        ("database_workload.json", 2),
        ("database_tuning_record.json", 2),
        ("database_tuning_record.json", 3),
        ("database_tuning_record.json", 4),
    ]
    assert "skipped 4 bad lines" in report.summary()


def test_not_a_library(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is no sqlite file" * 100)
    with pytest.raises(LibraryError, match="not a usable schedule library"):
        open_library(path)
    with pytest.raises(LibraryError, match="scheme"):
        open_library("mysql://x/y")
    with pytest.raises(LibraryError, match="cannot connect"):
        open_library("postgresql://nobody@127.0.0.1:1/nothing")


def test_two_processes_writing_at_once_keep_every_record(library_url):
    url = library_url
    key = target_key(get_config("host").tvm_target())
    with open_library(url) as lib:
        wid = lib.add_workload(matmul(8))
    script = textwrap.dedent(
        f"""
        import sys
        from transtune.library import open_library
        with open_library({url!r}) as lib:
            for i in range(150):
                lib.add_record({wid}, {key!r}, [[], []], [1e-3 + i * 1e-6], run_id=sys.argv[1])
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, f"p{i}"]) for i in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with open_library(url) as lib:
        runs = lib._query("SELECT run_id, COUNT(*) FROM records GROUP BY 1 ORDER BY 1")
        assert runs == [("p0", 150), ("p1", 150)]
        if url.startswith("sqlite"):
            assert lib._query("PRAGMA integrity_check") == [("ok",)]


def test_other_tvm_version_is_reported(tmp_path):
    with open_library(tmp_path / "lib.db") as lib:
        wid = lib.add_workload(matmul(8))
        lib.add_record(wid, "{}", [[], []], [1e-3])
        with lib.transaction() as cur:
            cur.execute("UPDATE records SET tvm_version = '0.19.0'")
        assert lib.foreign_versions() == {"0.19.0": 1}


def test_library_cli_import_info_ls_export(tuned_work_dir, tmp_path, capsys):
    from transtune.cli import main

    url = f"sqlite:///{tmp_path}/cli.db"
    assert main(["library", "import", str(tuned_work_dir), "--library", url, "--model", "mm"]) == 0
    assert "imported 8 records of 1 workloads" in capsys.readouterr().out
    assert main(["library", "info", "--library", url]) == 0
    out = capsys.readouterr().out
    assert "records: 8" in out and "['mm']" in out
    assert main(["library", "ls", "--library", url]) == 0
    assert "imported" in capsys.readouterr().out
    assert main(["library", "export", str(tmp_path / "out"), "--library", url]) == 0
    assert (tmp_path / "out" / "database_tuning_record.json").read_text().count("\n") == 8


def test_merge_keeps_the_best_records_and_provenance_filter(tmp_path, library_url):
    host = get_config("host").tvm_target()
    with open_library(tmp_path / "a.db") as a, open_library(library_url) as b:
        wid = a.add_workload(matmul(16), "matmul", 2 * 16**3, model="m1", kernel_name="mm")
        a.start_run("tune:m1:host", "tune", "m1", target_key(host), {})
        a.add_curve_point("tune:m1:host", 1, 1.0, 3e-3)
        a.add_kernel_point("tune:m1:host", wid, 3, 1e-3)
        for secs in (3e-3, 1e-3, 2e-3):
            a.add_record(wid, host, [[], []], [secs], run_id="tune:m1:host")
        a.add_record(wid, host, [[], []], [])  # failed: never copied with top_k
        a.add_record(wid, host, [[], []], [5e-4], provenance="transferred", donor="x#w9")
        # b already holds the same workload from another model: the merge reuses it.
        bid = b.add_workload(matmul(16), "matmul", model="m2")
        assert b.merge(a, top_k=2) == (1, 2)
        assert [r.mean_secs for r in b.records(bid, host)] == [5e-4, 1e-3]
        assert b.records(bid, host)[0].donor == "x#w9"
        assert b.info()["models"] == ["m1", "m2"]
        assert b.curve("tune:m1:host") == [(1, 1.0, 3e-3)]
        assert b.kernel_curves("tune:m1:host") == {bid: [(3, 1e-3)]}
        tuned = LibraryDatabase(b, host, read=("tuned",))
        (best,) = tuned.get_top_k(ms.database.Workload(matmul(16)), 1)
        assert float(best.run_secs[0]) == pytest.approx(1e-3)
        assert len(tuned.get_all_tuning_records()) == 1
        assert b.merge(a) == (1, 3)  # everything, failures included, but what b holds
        assert b.count_records(bid) == 5 and len(b.curve("tune:m1:host")) == 1
        assert b.merge(a) == (1, 0) and b.merge(b) == (1, 0)  # repeated and self-merge: no-ops
        with open_library(tmp_path / "c.db") as c:  # a workload left out, and its records
            assert c.merge(a, exclude={wid}) == (0, 0) and c.count_records() == 0
        with open_library(tmp_path / "d.db") as d, open_library(tmp_path / "e.db") as e:
            gone = d.add_workload(matmul(32), "matmul", model="m3")
            kept = d.add_workload(matmul(48), "matmul", model="m4")
            d.start_run("tune:m3:host", "tune", "m3", target_key(host), {})
            d.add_record(gone, host, [[], []], [1e-3], run_id="tune:m3:host")
            d.add_record(kept, host, [[], []], [2e-3])
            # A model held out: none of its workloads, records or runs are copied.
            assert e.merge(d, exclude_models={"m3"}) == (1, 1)
            assert e.info()["models"] == ["m4"] and e.tune_run("m3") is None
        # Compaction keeps the best records per workload and target, and every curve.
        assert a.kernel_classes() == {wid: "matmul"}
        a.snapshot(tmp_path / "copy.db")
        with open_library(tmp_path / "copy.db", read_only=True) as copy:
            assert copy.count_records() == a.count_records() == 5
        assert a.compactable(2) == 3 and a.count_records() == 5  # counting deletes nothing
        assert a.compact(2) == 3 and [r.mean_secs for r in a.records(wid, host)] == [5e-4, 1e-3]
        assert a.kernel_curves("tune:m1:host") == {wid: [(3, 1e-3)]}
        assert a.compact(2) == 0


def test_read_commands_never_create_or_change_a_library(tmp_path, capsys):
    missing = tmp_path / "typo.db"
    assert main(["library", "info", "--library", str(missing)]) == 2
    assert "no library at" in capsys.readouterr().err and not missing.exists()
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    before = foreign.read_bytes()
    with pytest.raises(LibraryError, match="not a transtune library"):
        open_library(foreign)
    assert foreign.read_bytes() == before and not Path(f"{foreign}-wal").exists()
    url = tmp_path / "lib.db"
    with open_library(url) as lib:
        lib.add_record(lib.add_workload(matmul(8)), get_config("host"), [[], []], [1e-3])
    stamp = url.stat().st_mtime_ns, url.read_bytes()
    with open_library(url, read_only=True) as lib:
        assert lib.info()["records"] == 1
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            lib.add_workload(matmul(16))
    assert (url.stat().st_mtime_ns, url.read_bytes()) == stamp
    assert not Path(f"{url}-wal").exists() and not Path(f"{url}-shm").exists()


def test_bad_run_times_are_refused_and_export_keeps_existing_logs(tmp_path):
    with open_library(tmp_path / "lib.db") as lib:
        wid = lib.add_workload(matmul(8))
        for bad in ([0.0], [-1e-3], [float("nan")], [float("inf")]):
            with pytest.raises(ValueError, match="positive and finite"):
                lib.add_record(wid, get_config("host"), [[], []], bad)
        lib.add_record(wid, get_config("host"), [[], []], [1e-3])
        out = tmp_path / "logs"
        out.mkdir()
        (out / "database_tuning_record.json").write_text("precious\n")
        with pytest.raises(LibraryError, match="holds a MetaSchedule database already"):
            export_json(lib, out)
        assert (out / "database_tuning_record.json").read_text() == "precious\n"


def test_a_corrupt_row_is_skipped_and_counted(tmp_path):
    url = tmp_path / "lib.db"
    config = get_config("host")
    with open_library(url) as lib:
        wid = lib.add_workload(matmul(8), "matmul", model="m")
        good = lib.add_record(wid, config, [[], []], [2e-3])
        bad = lib.add_record(wid, config, [[], []], [1e-3])
    with sqlite3.connect(url) as conn:
        conn.execute("UPDATE records SET trace = '{not json' WHERE id = ?", (bad,))
    with open_library(url, read_only=True) as lib:
        assert [r.id for r in lib.records()] == [good]
        assert lib.info()["unreadable_records"] == 1
        assert [r.id for _, _, _, r in lib.best_by_class("matmul", config)] == []  # best is bad
        view = LibraryDatabase(lib, config)
        assert len(view.get_top_k(ms.database.Workload(matmul(8)), 2)) == 1


def test_postgresql_passwords_are_never_shown():
    from transtune.library.backend import redact

    assert redact("postgresql://me:s3cret@db/lib") == "postgresql://me:***@db/lib"
    assert redact("postgresql://me@db/lib") == "postgresql://me@db/lib"
    with pytest.raises(LibraryError) as err:
        open_library("postgresql://me:s3cret@127.0.0.1:1/nothing")
    assert "s3cret" not in str(err.value)


def test_a_writer_waits_a_bounded_time_then_gets_one_clear_error(library_url):
    from transtune.library.store import Library

    lib = Library(library_url, busy_timeout=1.0)
    if library_url.startswith("sqlite"):  # another writer, stalled inside its transaction
        holder = sqlite3.connect(library_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        holder = psycopg.connect(library_url, autocommit=True)
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(7216)")
    try:
        with pytest.raises(LibraryError, match="no write possible within 1 s"):
            lib.add_curve_point("r", 1, 1.0, 1.0)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lib.start_run("r", "tune", "m", "{}", {})  # the library is usable again at once
    lib.add_curve_point("r", 1, 1.0, 1.0)
    assert lib.curve("r") == [(1, 1.0, 1.0)]
    lib.close()


def test_a_library_of_another_schema_version_is_refused(tmp_path):
    open_library(tmp_path / "lib.db").close()
    with sqlite3.connect(tmp_path / "lib.db") as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    for read_only in (False, True):
        with pytest.raises(LibraryError, match="schema version 99, this transtune reads"):
            open_library(tmp_path / "lib.db", read_only=read_only)


def test_a_library_from_before_kernel_curves_reads_and_merges(tmp_path):
    import sqlite3

    host = get_config("host").tvm_target()
    old = tmp_path / "old.db"
    with open_library(old) as lib:
        wid = lib.add_workload(matmul(16), "matmul", model="m1")
        lib.start_run("tune:m1:host", "tune", "m1", target_key(host), {})
        lib.add_curve_point("tune:m1:host", 1, 1.0, 1e-3)
        lib.add_record(wid, host, [[], []], [1e-3], run_id="tune:m1:host")
    with sqlite3.connect(old) as conn:
        conn.execute("DROP TABLE kernel_curve")  # as libraries written before it was added
    with open_library(old, read_only=True) as src, open_library(tmp_path / "new.db") as dst:
        assert src.kernel_curves("tune:m1:host") == {}
        assert dst.merge(src) == (1, 1) and dst.curve("tune:m1:host") == [(1, 1.0, 1e-3)]
