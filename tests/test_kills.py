"""A SIGKILL after every durable write of ``dataset collect`` (manifest, descriptors, part
files, and each delete of its compaction), then a plain rerun: no record is lost, none is
duplicated, and every program ends with its features and its workload's design spaces."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from transtune.dataset import DatasetStore, load_records

# The collection, in a fresh process that kills itself after its Nth write (0: never).
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import torch
    import transtune.dataset.store as store
    from transtune.dataset import collect
    from transtune.dataset.collection import DatasetKernel
    from transtune.frontend import from_module
    from transtune.targets import get_config
    from transtune.tasks import extract_kernels

    out, kill_after = sys.argv[1], int(sys.argv[2])
    writes = [0]

    def counted(write):
        def wrapper(*args, **kwargs):
            result = write(*args, **kwargs)
            writes[0] += 1
            if writes[0] == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        return wrapper

    store._write_parquet = counted(store._write_parquet)
    store.write_text_atomic = counted(store.write_text_atomic)
    Path.unlink = counted(Path.unlink)
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                 torch.nn.Linear(16, 8)).eval()
    model = from_module(module, (torch.randn(4, 32),), name="mlp")
    kernels = [DatasetKernel(k, ["mlp@b4"], [k.weight])
               for k in extract_kernels(model.mod, get_config("host").tvm_target())]
    collect(out, kernels, ["host-1core"], per_kernel=2, seed=0)
    print("WRITES", writes[0])
    """
)


def _collect(out, kill_after: int) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(out), str(kill_after)], stdout=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, _ = proc.communicate(timeout=300)
    finally:
        try:  # measurement workers the kill orphaned
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout)


def _records(out) -> dict[tuple, float]:
    if not (out / "dataset.json").is_file():
        return {}
    table, report = load_records(out, ["workload", "sample", "mean_secs"])
    rows = table.to_pylist()
    keys = [(r["workload"], r["sample"], r["target"]) for r in rows]
    assert len(keys) == len(set(keys)), "a record is duplicated"
    return {k: r["mean_secs"] for k, r in zip(keys, rows, strict=True)}


@pytest.mark.slow
def test_a_kill_after_every_write_of_collect_loses_and_duplicates_nothing(tmp_path):
    clean = _collect(tmp_path / "ref", 0)
    assert clean.returncode == 0
    writes = int(clean.stdout.split("WRITES")[1])
    expected = set(_records(tmp_path / "ref"))
    assert writes >= 8 and expected
    for n in range(1, writes + 1):
        out = tmp_path / f"kill{n}"
        assert _collect(out, n).returncode == -signal.SIGKILL
        before = _records(out)
        assert _collect(out, 0).returncode == 0, f"rerun after a kill at write {n}"
        after = _records(out)
        assert set(after) == expected, f"kill at write {n}"
        assert all(after[k] == v for k, v in before.items()), f"kill at write {n}: re-measured"
        store = DatasetStore(out)
        features = store.read("features", ["workload", "sample"]).to_pylist()
        assert {(f["workload"], f["sample"]) for f in features} >= {k[:2] for k in after}
        spaces = {s["workload"] for s in store.read("spaces", ["workload"]).to_pylist()}
        assert spaces >= {k[0] for k in after}, f"kill at write {n}: a workload lost its spaces"
