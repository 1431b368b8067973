"""Dataset: hardware descriptors, sampling + measurement end to end, resume, corrupt files,
Parquet round trip (a stored sample rebuilds the very schedule that was measured)."""

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import tvm_ffi

from transtune.dataset import DatasetStore, collect, dataset_info, load_records
from transtune.dataset.collection import DatasetKernel
from transtune.dataset.info import export_json
from transtune.dataset.store import DatasetError
from transtune.frontend import from_module
from transtune.hardware import HardwareDescriptor, describe
from transtune.measure import load_cpu_tensor_intrinsics
from transtune.schedules import design_spaces, kernel_seed, rebuild, sample
from transtune.targets import get_config
from transtune.tasks import extract_kernels

CONFIGS = ["host", "host-1core"]
IDS = [get_config(c).name for c in CONFIGS]


@pytest.fixture(scope="module")
def kernels():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    model = from_module(module, (torch.randn(4, 32),), name="mlp")
    ks = extract_kernels(model.mod, get_config("host").tvm_target())
    return [DatasetKernel(k, ["mlp@b4"], [k.weight]) for k in ks]


@pytest.fixture(scope="module")
def collected(kernels, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "data"
    stats = collect(str(out), kernels, CONFIGS, per_kernel=3, seed=0)
    return out, stats


def test_descriptor_of_this_host():
    d = describe("host-avx2")
    config = get_config("host-avx2")
    assert d.id == config.name and d.config == "host-avx2" and d.fingerprint == config.fingerprint
    assert d.kind == "cpu" and d.isa == "avx2"
    assert d.simd_bits == 256 and d.threads == get_config("host-avx2").num_threads
    assert d.l1d_kib > 0 and d.l3_kib >= d.l2_kib > 0
    assert d.measured_bandwidth_gbs > 0.1 and d.measured_peak_gflops > 0.1
    assert HardwareDescriptor.from_dict(d.as_dict()) == d
    assert d.vector().shape == (len(HardwareDescriptor.FEATURES),)


def test_collect_measures_every_sample_on_every_configuration(collected, kernels):
    out, stats = collected
    records, report = load_records(out)
    assert report.summary() == "nothing skipped"
    assert stats.records == len(records) > 0 and not stats.interrupted
    by_target = records.group_by("target").aggregate([("sample", "count")]).to_pylist()
    counts = {row["target"]: row["sample_count"] for row in by_target}
    assert set(counts) == set(IDS) and len(set(counts.values())) == 1
    ok = [r for r in records.to_pylist() if r["status"] == "ok"]
    assert ok and all(len(r["run_secs"]) == 3 and r["mean_secs"] > 0 for r in ok)
    info = dataset_info(out)
    assert info["kernels"] == len({r["workload"] for r in records.to_pylist()})
    assert set(info["hardware"]) == set(info["by_hardware"]) == set(IDS)
    assert info["median_cv"] is not None and info["programs_without_features"] == 0
    assert info["models"] == ["mlp"]
    features = DatasetStore(out).read("features").to_pylist()
    assert features and all(len(f["values"]) == 164 * f["n_stores"] for f in features)


@pytest.mark.slow  # about 60 s; the Ctrl-C tests resume a collection too (make test-slow)
def test_resume_measures_only_what_is_missing(collected, kernels):
    out, _ = collected
    again = collect(str(out), kernels, CONFIGS, per_kernel=3, seed=0)
    assert again.records == 0 and again.kernels_skipped == len(kernels)
    more = collect(str(out), kernels[:1], CONFIGS, per_kernel=4, seed=0)
    assert more.records <= len(CONFIGS)  # only sample 3, on each configuration
    # A configuration added later that shares its build with one already there is timed on
    # the same build; the one already there is not recorded twice.
    first = collect(str(out), kernels[:1], ["host", "host-avx2"], per_kernel=3, seed=0)
    added = collect(str(out), kernels[:1], ["host", "host-avx2", "host-avx2-1core"], per_kernel=3)
    assert added.records == first.records > 0
    records, _ = load_records(out)
    samples = {(r["workload"], r["target"], r["sample"]) for r in records.to_pylist()}
    assert len(samples) == len(records)  # nothing measured twice
    # Every measured program has its features, the ones a larger --per-kernel added too.
    features = DatasetStore(out).read("features", ["workload", "sample"]).to_pylist()
    assert {(r["workload"], r["sample"]) for r in records.to_pylist()} == {
        (f["workload"], f["sample"]) for f in features
    }


def test_resume_with_another_seed_or_sampling_target_is_refused(collected, kernels):
    out, _ = collected
    with pytest.raises(DatasetError, match="collected with sampling"):
        collect(str(out), kernels[:1], CONFIGS, per_kernel=3, seed=1)
    with pytest.raises(DatasetError, match="collected with sampling"):
        collect(str(out), kernels[:1], ["host-avx2", *CONFIGS], per_kernel=3, seed=0)
    # An alias and its hardware id are one configuration: one partition, not measured twice.
    with pytest.raises(DatasetError, match="more than once"):
        collect(str(out), kernels[:1], [*CONFIGS, IDS[0]], per_kernel=3, seed=0)


def test_a_hardware_id_of_another_cpu_is_refused(collected, kernels):
    out, _ = collected
    store = DatasetStore(out)
    (part,) = store.files("hardware")
    table = pq.read_table(part).to_pylist()
    row = next(r for r in table if r["id"] == IDS[1])
    descriptor = json.loads(row["descriptor"])
    descriptor["fingerprint"] = {**descriptor["fingerprint"], "model_name": "Another CPU"}
    other = store.write("hardware", [{**row, "descriptor": json.dumps(descriptor)}])
    part.rename(part.with_suffix(".keep"))  # only the other CPU's row is visible now
    try:
        with pytest.raises(DatasetError, match=f"hardware id '{IDS[1]}' is another CPU"):
            collect(str(out), kernels[:1], CONFIGS, per_kernel=3, seed=0)
    finally:
        other.unlink()
        part.with_suffix(".keep").rename(part)


def test_kernels_seen_again_in_another_model_record_it(collected, kernels, tmp_path):
    out, _ = collected
    again = [DatasetKernel(dk.kernel, ["mlp2@b4"], [2]) for dk in kernels]
    stats = collect(str(out), again, CONFIGS, per_kernel=3, seed=0)
    assert stats.records == 0  # nothing new to measure, but the new model is recorded
    tags = DatasetStore(out).occurrences()
    assert all(tags[dk.kernel.workload_hash] == {"mlp@b4": dk.kernel.weight, "mlp2@b4": 2}
               for dk in kernels)  # fmt: skip
    assert dataset_info(out)["models"] == ["mlp", "mlp2"]


def test_corrupt_files_and_rows_are_skipped_and_reported(collected, tmp_path):
    out, _ = collected
    bad = out / "records" / f"target={IDS[0]}" / "part-zzzz-bad.parquet"
    bad.write_bytes(b"PAR1 not really parquet")
    store = DatasetStore(out)
    row = {"workload": "w", "sample": 0, "space": 0, "decisions": "[]", "run_secs": [1.0],
           "mean_secs": -1.0, "status": "ok", "error": None, "collected": 0.0}  # fmt: skip
    odd = store.write("records", [row, {**row, "status": "exploded", "mean_secs": 1.0}], IDS[0])
    # A space id that does not fit the column: the file is skipped, never wrapped to -25536.
    wide = bad.with_name("part-zzzz-wide.parquet")
    columns = {k: [v] for k, v in {**row, "mean_secs": 1.0, "workload": "w2"}.items()}
    pq.write_table(pa.table({**columns, "space": pa.array([40000], pa.int64())}), wide)
    try:
        records, report = load_records(out)
        assert "skipped 2 unreadable files" in report.summary() and report.skipped_rows == 2
        assert not {"w", "w2"} & set(records["workload"].to_pylist())
    finally:
        for path in (bad, odd, wide):
            path.unlink()


def test_stored_sample_rebuilds_the_measured_schedule(kernels):
    load_cpu_tensor_intrinsics()
    k = max((dk.kernel for dk in kernels), key=lambda k: k.flops)
    spaces, postprocs = design_spaces(k.mod, get_config("host").tvm_target())
    samples = sample(k.mod, spaces, postprocs, 4, kernel_seed(k.workload_hash, 0))
    again = sample(k.mod, spaces, postprocs, 4, kernel_seed(k.workload_hash, 0))
    assert [s.decisions for s in samples] == [s.decisions for s in again]  # deterministic
    for s in samples:
        json.loads(s.decisions)
        rebuilt = rebuild(k.mod, spaces[s.space], s.decisions, postprocs)
        assert tvm_ffi.structural_equal(rebuilt.mod, s.schedule.mod)


def test_export_to_metaschedule_json(collected, tmp_path):
    from tvm.s_tir import meta_schedule as ms

    out, _ = collected
    count = export_json(out, tmp_path / "ms", IDS[0])
    records, _ = load_records(out, target=IDS[0])
    assert count == len(records)
    database = ms.database.JSONDatabase(work_dir=str(tmp_path / "ms"), allow_missing=False)
    assert len(database.get_all_tuning_records()) == count
    with pytest.raises(DatasetError, match="holds a MetaSchedule database already"):
        export_json(out, tmp_path / "ms", IDS[0])  # again: refused, not every record twice


def test_programs_of_another_configuration_are_measured_again(collected, kernels):
    """What a second CPU does: the same programs, rebuilt for its target, no sampling (here
    the AVX2 build stands in for the other CPU)."""
    out, _ = collected
    stats = collect(str(out), kernels, ["host-sse4.2"], 3, programs_from=IDS[0])
    assert stats.records > 0 and stats.not_rebuilt == 0
    records, _ = load_records(out, ["workload", "sample", "decisions"])
    by = {}
    for r in records.to_pylist():
        by.setdefault(r["target"], set()).add((r["workload"], r["sample"], r["decisions"]))
    assert by[get_config("host-sse4.2").name] <= by[IDS[0]]
    with pytest.raises(DatasetError, match="no records of 'nope'"):
        collect(str(out), kernels, ["host-sse4.2"], 3, programs_from="nope")


def test_a_compaction_killed_before_its_deletes_duplicates_nothing(tmp_path, monkeypatch):
    store = DatasetStore(tmp_path / "ds", create=True)
    row = {"workload": "w", "sample": 0, "space": 0, "decisions": "[]", "run_secs": [1e-3],
           "mean_secs": 1e-3, "status": "ok", "error": None, "collected": 0.0}  # fmt: skip
    for i in range(3):
        store.write("records", [{**row, "sample": i}], "cpu-a")
    (tmp_path / "ds" / "records" / "target=cpu-a" / "part-0-typo.parquet").write_bytes(b"x")
    real_unlink = Path.unlink

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt  # the process dies right after the compacted file landed

    monkeypatch.setattr(Path, "unlink", killed)
    with pytest.raises(KeyboardInterrupt):
        store.compact()
    monkeypatch.setattr(Path, "unlink", real_unlink)
    records, report = load_records(tmp_path / "ds")
    assert sorted(records["sample"].to_pylist()) == [0, 1, 2]  # not 6 rows
    assert "skipped 1 unreadable files" in report.summary()
    assert store.compact() == 3  # the leftovers go now; the unreadable part stays
    parts = sorted(p.name for p in (tmp_path / "ds" / "records" / "target=cpu-a").iterdir())
    assert len(parts) == 2 and "part-0-typo.parquet" in parts
    assert sorted(load_records(tmp_path / "ds")[0]["sample"].to_pylist()) == [0, 1, 2]
    # A killed writer's temporary file goes at a later compaction, once it is an hour old.
    folder = tmp_path / "ds" / "records" / "target=cpu-a"
    stale, fresh = folder / "part-1.tmp", folder / "part-2.tmp"
    for tmp in (stale, fresh):
        tmp.write_bytes(b"half a part")
    os.utime(stale, (0, 0))
    store.compact()
    assert not stale.exists() and fresh.exists()


def test_a_kill_before_features_are_written_is_repaired_by_a_rerun(kernels, tmp_path):
    """Records written, the process killed before the kernel's features: the kernel looks
    complete, yet the rerun must write its features (it used to skip it forever)."""
    out = tmp_path / "ds"
    collect(str(out), kernels[:1], ["host-1core"], 3, seed=0)
    for part in DatasetStore(out).files("features"):
        part.unlink()
    assert dataset_info(out)["programs_without_features"] == 3
    again = collect(str(out), kernels[:1], ["host-1core"], 3, seed=0)
    assert again.records == 0 and dataset_info(out)["programs_without_features"] == 0


def test_search_trajectories_are_measured_beside_samples_and_kept_apart(kernels, tmp_path):
    from transtune.costmodel import load_cost_data
    from transtune.dataset.programs import TRAJECTORY_BASE

    out = tmp_path / "data"
    k = max((dk.kernel for dk in kernels), key=lambda k: k.flops)
    dk = next(d for d in kernels if d.kernel is k)
    stats = collect(str(out), [dk], CONFIGS, per_kernel=2, seed=0, trajectory=8)
    assert not stats.interrupted and stats.not_rebuilt == 0
    rows, report = load_records(out)
    first = [r for r in rows.to_pylist() if r["target"] == IDS[0] and r["source"] == "trajectory"]
    assert 0 < stats.reused <= sum(r["status"] == "ok" for r in first)  # the search's timings
    assert report.summary() == "nothing skipped"
    searched = {}
    for r in rows.to_pylist():
        assert (r["source"] == "trajectory") == (r["sample"] >= TRAJECTORY_BASE), r
        if r["source"] == "trajectory":
            searched.setdefault(r["target"], set()).add((r["sample"], r["space"], r["decisions"]))
    # The search's programs, measured on every configuration (the same ones on each).
    assert set(searched) == set(IDS) and searched[IDS[0]] == searched[IDS[1]]
    assert 4 <= len(searched[IDS[0]]) <= 8
    # Each rebuilds from its stored instruction list (a space of the kernel) and decisions.
    store = DatasetStore(out)
    spaces = store.read("spaces").to_pylist()
    texts = {(s["workload"], s["space"]): s["insts"] for s in spaces}
    assert len(texts) == len(spaces)  # the search's spaces numbered after the design spaces
    own = design_spaces(k.mod, get_config("host").tvm_target())[0]
    assert [texts[k.workload_hash, i] for i in range(len(own))] == own
    postprocs = design_spaces(k.mod, get_config("host").tvm_target())[1]
    for _, space, decisions in searched[IDS[0]]:
        assert rebuild(k.mod, texts[k.workload_hash, space], decisions, postprocs) is not None
    data = load_cost_data(out)
    assert set(data.source) == {"random", "trajectory"} and len(data) == len(data.source)
    again = collect(str(out), [dk], CONFIGS, per_kernel=2, seed=0, trajectory=8)
    assert again.records == 0 and again.kernels_skipped == 1  # resumed: no second search


def test_records_from_before_the_source_column_are_random_samples(tmp_path):
    store = DatasetStore(tmp_path / "ds", create=True)
    row = {"workload": "w", "sample": 0, "space": 0, "decisions": "[]", "run_secs": [1e-3],
           "mean_secs": 1e-3, "status": "ok", "error": None, "collected": 0.0}  # fmt: skip
    folder = tmp_path / "ds" / "records" / "target=cpu-a"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row]), folder / "part-0-old.parquet")  # no column
    store.write("records", [{**row, "sample": 1, "source": "trajectory"}], "cpu-a")
    expected = [(0, "random"), (1, "trajectory")]
    read = store.read("records", ["sample", "source"]).to_pylist()
    assert sorted((r["sample"], r["source"]) for r in read) == expected
    assert store.compact() == 2  # the old file merges with the new one, filled in
    read = store.read("records", ["sample", "source"]).to_pylist()
    assert sorted((r["sample"], r["source"]) for r in read) == expected
