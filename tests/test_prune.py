"""Pruning strategies: kept fraction, determinism, and a pruned dataset that reads back."""

import numpy as np
import pytest
import torch

from transtune.dataset import collect, load_records
from transtune.dataset.collection import DatasetKernel
from transtune.dataset.prune import STRATEGIES, Programs, load_programs, prune, select
from transtune.dataset.store import DatasetError
from transtune.frontend import from_module
from transtune.targets import get_config
from transtune.tasks import extract_kernels


def synthetic(kernels: int = 6, per_kernel: int = 40, seed: int = 0) -> Programs:
    rng = np.random.default_rng(seed)
    n = kernels * per_kernel
    workload = np.repeat([f"w{i}" for i in range(kernels)], per_kernel).astype(object)
    features = rng.normal(size=(n, 165)).astype(np.float32)
    dups = np.asarray([k * per_kernel + i for k in range(kernels) for i in range(1, per_kernel, 7)])
    features[dups] = features[dups - 1]  # exact duplicates within each kernel
    return Programs(
        workload, np.tile(np.arange(per_kernel), kernels),
        np.asarray(["a" if i % 2 else "b" for i in range(n)], dtype=object)[
            np.repeat(np.arange(kernels), per_kernel)],
        np.repeat(2.0 ** np.arange(kernels), per_kernel), features,
        rng.uniform(0.01, 1, n).astype(np.float32),
    )  # fmt: skip


@pytest.mark.parametrize("strategy", [*STRATEGIES, "dedup+diversity", "kernels+uncertainty"])
def test_strategies_keep_their_share_deterministically(strategy):
    programs = synthetic()
    mask = select(programs, strategy, 0.25, seed=3)
    assert mask.dtype == bool and len(mask) == len(programs)
    slack = 40 if strategy == "kernels" else 0.05 * len(programs)  # kernels: whole ones
    assert abs(mask.sum() - 0.25 * len(programs)) <= slack, mask.sum()
    assert (select(programs, strategy, 0.25, seed=3) == mask).all()


def test_dedup_drops_identical_programs_first():
    programs = synthetic()
    kept = select(programs, "dedup", 1.0)
    dups = np.asarray([k * 40 + i for k in range(6) for i in range(1, 40, 7)])
    assert not kept[dups].any() and kept.sum() == len(programs) - len(dups)


def test_kernels_keeps_whole_kernels_across_the_flops_range():
    programs = synthetic()
    kept = set(programs.workload[select(programs, "kernels", 0.5)])
    assert kept == {"w0", "w4", "w1", "w5"}  # classes b: w0, w2, w4 and a: w1, w3, w5


def test_exploit_fills_its_second_half_with_the_programs_predicted_fastest():
    programs = synthetic(per_kernel=80)
    programs.label[:] = 1 / (1 + np.exp(-2 * programs.features[:, 0]))  # learnable speed
    programs.label[::9] = np.nan  # not measured on the reference configuration
    random, fast = (select(programs, s, 0.3, seed=1) for s in ("subsample", "exploit"))
    assert np.nanmean(programs.label[fast]) > np.nanmean(programs.label[random]) + 0.1
    for w in np.unique(programs.workload):  # every kernel keeps its share
        assert fast[programs.workload == w].sum() == 24


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown pruning strategy"):
        select(synthetic(), "random", 0.5)
    with pytest.raises(ValueError, match="keep"):
        select(synthetic(), "subsample", 0.0)


def test_prune_writes_a_dataset_of_the_kept_programs(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).eval()
    model = from_module(module, (torch.randn(8, 32),), name="mlp")
    kernels = [DatasetKernel(k, ["mlp@b8"], [k.weight])
               for k in extract_kernels(model.mod, get_config("host").tvm_target())]  # fmt: skip
    src, out = tmp_path / "src", tmp_path / "out"
    collect(str(src), kernels, ["host-1core"], per_kernel=8, seed=0)
    summary = prune(src, out, "subsample", 0.5, seed=1)
    records, report = load_records(out)
    assert report.summary() == "nothing skipped"
    assert summary["records"] == len(records) and 0 < summary["programs"] < summary["of"]
    assert len(load_programs(out)) == summary["programs"]
    for existing in (out, src):  # a rerun, or --out the source itself: refused, not appended
        with pytest.raises(DatasetError, match="not empty"):
            prune(src, existing, "subsample", 0.5, seed=1)
    assert len(load_records(out)[0]) == summary["records"]
    from transtune.cli import main

    argv = ["dataset", "prune", str(src), "--strategy", "dedup+diversity", "--keep", "0.25",
            "--out", str(tmp_path / "cli")]  # fmt: skip
    assert main(argv) == 0
