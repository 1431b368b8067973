"""Cost models on synthetic records (no dataset, no TVM build): MetaSchedule's own models as
peers, pack-sum features, class ids, validation-picked epochs, the lookup baseline, the
ensemble, per-task features and the mixed loss."""

import random

import numpy as np
import pytest
import torch

from transtune.costmodel import CostModelError, create, load


def synthetic_data(groups: int = 8, per_group: int = 24, seed: int = 0):
    """Records whose speed grows with one feature: a learnable ranking, no TVM needed."""
    from transtune.costmodel import CostData

    rng = np.random.default_rng(seed)
    n = groups * per_group
    lengths = rng.integers(1, 4, n)
    stores = rng.normal(size=(lengths.sum(), 164)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    signal = np.add.reduceat(stores[:, 3], offsets[:-1])
    group = np.repeat(np.arange(groups), per_group).astype(np.int32)
    latency = np.exp(-signal + 0.1 * rng.normal(size=n)) * (1 + group)
    best = np.array([latency[group == g].min() for g in range(groups)])
    return CostData(
        stores, offsets, np.zeros((n, 8), np.float32), np.zeros(n, np.float32),
        np.zeros(n, np.int32), latency, (best[group] / latency).astype(np.float32), group,
        np.asarray([f"w{g}" for g in group], dtype=object), np.full(n, "host", dtype=object),
    )  # fmt: skip


def test_metaschedule_peers_run_on_the_same_data():
    from transtune.costmodel.metaschedule import MetaScheduleMLP, MetaScheduleXGB

    data = synthetic_data(groups=6, per_group=12)
    states = random.getstate(), torch.random.get_rng_state()
    for peer in (MetaScheduleXGB(early_stopping_rounds=5), MetaScheduleMLP(epochs=10)):
        scores = peer.fit(data).score(data)
        assert scores["pca"] > 0.6, (peer.kind, scores)  # random: 0.5
    # MetaSchedule's trainer seeds the global generators: the caller's are given back.
    assert random.getstate() == states[0] and torch.equal(torch.random.get_rng_state(), states[1])
    with pytest.raises(ValueError, match=">= 5"):
        MetaScheduleMLP().fit(synthetic_data(groups=4))


def test_pack_sum_of_any_rows_sums_each_rows_own_stores():
    from transtune.costmodel.models import pack_sum

    data = synthetic_data(groups=2, per_group=5)
    rows = np.array([7, 2, 3, 0])  # out of order, with gaps
    x = pack_sum(data, rows)
    for r, row in zip(rows, x, strict=True):
        own = data.stores[data.offsets[r] : data.offsets[r + 1]]
        assert np.allclose(row[:164], own.sum(0), atol=1e-5)
        assert np.isclose(row[164], np.log2(len(own) + 1))


def test_unseen_kernel_class_gets_the_spare_id_online_and_offline():
    from transtune.costmodel import XGBCostModel
    from transtune.costmodel.metaschedule import LearnedCostModel

    model = XGBCostModel()
    model.classes = ["conv2d", "matmul"]
    assert [model.class_id(c) for c in ("conv2d", "matmul", "softmax")] == [0, 1, 2]
    guide = LearnedCostModel(model, np.zeros(8, np.float32), {"w1": "matmul", "w2": "softmax"})
    assert guide.classes == {"w1": 1, "w2": 2}  # not 0, which is conv2d


def test_validation_kernels_pick_the_epoch_and_the_callers_rng_is_untouched():
    from dataclasses import replace

    from transtune.costmodel import TorchConfig, TorchCostModel

    data = synthetic_data(groups=8, per_group=12)
    state = torch.get_rng_state()
    model = TorchCostModel(TorchConfig(arch="mlp", epochs=4, validation=0.25, seed=1))
    model.fit(data)
    assert torch.equal(torch.get_rng_state(), state)  # seeded with its own RNG state
    history = model.history
    assert len(history["val_pca"]) == 4 and -1 <= history["best_epoch"] < 4
    kept = [history["start_pca"], *history["val_pca"]][history["best_epoch"] + 1]
    assert kept == max(history["start_pca"], *history["val_pca"])
    again = TorchCostModel(TorchConfig(arch="mlp", epochs=4, validation=0.25, seed=1)).fit(data)
    assert again.history["val_pca"] == history["val_pca"]  # the seed decides, nothing else
    # Fine-tuning that cannot improve on validation keeps the weights it started from.
    # It does not claim the configuration it saw either.
    before, seen = again.predict(data), again.trained_on
    again.config.lr = 0.0
    other = replace(data, target=np.full(len(data), "cpu-b", dtype=object))
    assert again.fit(other).history["best_epoch"] == -1
    assert np.array_equal(again.predict(data), before) and again.trained_on == seen


def test_fine_tuning_adapts_a_copy_and_records_the_new_configuration():
    from dataclasses import replace

    from transtune.costmodel import TorchConfig, TorchCostModel

    data = synthetic_data(groups=12, per_group=12)
    data = replace(data, target=np.where(data.group < 6, "cpu-a", "cpu-b").astype(object))
    model = TorchCostModel(TorchConfig(arch="mlp", epochs=6))
    model.fit(data, np.flatnonzero(data.group < 6))
    before = model.predict(data)
    tuned = model.fine_tuned(data, np.flatnonzero(data.group >= 6))
    assert np.array_equal(model.predict(data), before)  # the pre-trained model is untouched
    c = tuned.config
    assert (c.epochs, c.validation) == (5, 0.2) and c.lr == pytest.approx(model.config.lr / 10)
    h = tuned.history  # epochs picked on held-out kernels of the new configuration
    assert len(h["val_pca"]) == 5 and h["start_pca"] is not None
    assert [h["start_pca"], *h["val_pca"]][h["best_epoch"] + 1] == max(
        h["start_pca"], *h["val_pca"]
    )
    # The new configuration counts as trained on only when an epoch's weights were kept.
    adapted = ["cpu-a"] if h["best_epoch"] == -1 else ["cpu-a", "cpu-b"]
    assert model.trained_on == ["cpu-a"] and tuned.trained_on == adapted


def test_fine_tuning_that_improves_on_validation_adds_the_new_configuration():
    from dataclasses import replace

    from transtune.costmodel import TorchConfig, TorchCostModel

    data = synthetic_data(groups=12, per_group=12)
    new = data.group >= 6
    data = replace(data, target=np.where(new, "cpu-b", "cpu-a").astype(object))
    latency = 1 / data.latency  # the ranking reversed: pre-training learns it backwards
    best = np.array([latency[data.group == g].min() for g in range(12)])
    wrong = replace(data, latency=latency, label=(best[data.group] / latency).astype(np.float32))
    model = TorchCostModel(TorchConfig(arch="mlp", epochs=6, lr=1e-2))
    model.fit(wrong, np.flatnonzero(~new))
    tuned = model.fine_tuned(data, np.flatnonzero(new))
    h = tuned.history
    assert h["best_epoch"] >= 0 and max(h["val_pca"]) > h["start_pca"]
    assert tuned.trained_on == ["cpu-a", "cpu-b"]


def test_validation_holds_out_kernels_or_with_few_kernels_programs_of_each():
    from transtune.costmodel.models import _hold_out

    data = synthetic_data(groups=8, per_group=12)
    rows = np.arange(len(data))
    train, held = _hold_out(data, rows, 0.25, seed=0)
    assert len(set(data.workload[held])) == 2 and not set(data.workload[held]) & set(
        data.workload[train])  # fmt: skip
    few = rows[data.group < 3]
    train, held = _hold_out(data, few, 0.25, seed=0)
    assert set(data.workload[held]) == set(data.workload[train]) == {"w0", "w1", "w2"}
    assert sorted([*train, *held]) == few.tolist()
    assert _hold_out(data, few, 0.0, seed=0)[1] is None


def test_the_lookup_baseline_ranks_by_the_same_programs_latency_elsewhere():
    from dataclasses import replace

    from transtune.costmodel import CostData

    # Kernel w0's 4 programs on "old" and on "new" (the new CPU keeps their order but one);
    # program 3 of w1 was never measured on "old".
    old = [1.0, 2.0, 3.0, 4.0]
    new = [1.5, 2.5, 4.5, 3.5]
    workload = np.asarray(["w0"] * 8 + ["w1"] * 2, dtype=object)
    target = np.asarray(["old"] * 4 + ["new"] * 4 + ["new"] * 2, dtype=object)
    sample = np.asarray([0, 1, 2, 3, 0, 1, 2, 3, 0, 3])
    latency = np.asarray(old + new + [2.0, 1.0]) * 1e-3
    data = synthetic_data(groups=1, per_group=10)
    data = replace(data, workload=workload, target=target, sample=sample, latency=latency,
                   group=np.asarray([0] * 4 + [1] * 4 + [2] * 2, np.int32))  # fmt: skip
    assert isinstance(data, CostData)
    model = create("lookup", source="old").fit(data, np.arange(4))
    test = np.arange(4, 10)
    assert model.found(data, test).tolist() == [True] * 4 + [False, False]
    scores = model.predict(data, test)
    assert scores[0] > scores[1] > scores[2] > scores[3]  # the old CPU's order
    assert scores[5] < scores.min(initial=np.inf, where=model.found(data, test))
    metrics = model.score(data, np.arange(4, 8))
    assert metrics["pca"] == pytest.approx(5 / 6) and metrics["peak@1"] == 1.0
    with pytest.raises(CostModelError, match="nothing to save"):
        model.save("x.json")


def test_the_lookup_residual_learns_what_the_lookup_misses():
    from dataclasses import replace

    # Kernels w0..w19 measured on "old" (groups 0-19) and "new" (20-39), the same programs.
    # The new CPU's speed follows a program feature that the old CPU's latency shows weakly.
    kernels, per = 20, 24
    data = synthetic_data(groups=2 * kernels, per_group=per)
    rng = np.random.default_rng(1)
    signal = np.add.reduceat(data.stores[:, 3], data.offsets[:-1])
    half = kernels * per
    latency = np.exp(-signal)
    latency[:half] = np.exp(-0.2 * signal[half:] + 0.5 * rng.normal(size=half))
    best = np.array([latency[data.group == g].min() for g in range(2 * kernels)])
    data = replace(
        data, latency=latency, label=(best[data.group] / latency).astype(np.float32),
        workload=np.asarray([f"w{g % kernels}" for g in data.group], dtype=object),
        target=np.asarray(["old"] * half + ["new"] * half, dtype=object),
        sample=np.tile(np.arange(per), 2 * kernels),
    )  # fmt: skip
    train = np.flatnonzero((data.target == "old") | (data.group < kernels + 12))
    test = np.flatnonzero(data.group >= kernels + 12)
    lookup = create("lookup", source="old").fit(data, train).score(data, test)["pca"]
    model = create("lookup-residual", source="old").fit(data, train)
    assert model.rounds > 0 and model.score(data, test)["pca"] > lookup + 0.05, lookup
    # From one kernel of the new CPU nothing is learned: the lookup alone.
    one = np.flatnonzero((data.target == "old") | (data.group == kernels))
    alone = create("lookup-residual", source="old").fit(data, one)
    assert alone.booster is None
    assert np.array_equal(alone.predict(data, test), create("lookup", source="old")
                          .fit(data, one).predict(data, test))  # fmt: skip


def test_ensemble_per_task_features_and_the_mixed_loss(tmp_path):
    from transtune.costmodel.data import standardized_per_group

    data = synthetic_data(groups=6, per_group=16)
    rows = np.arange(len(data))
    normal = standardized_per_group(data, rows[data.group == 2])
    stores = normal.segments(rows[data.group == 2])
    x = np.concatenate(stores)
    assert np.allclose(x.mean(0), 0, atol=1e-5) and np.allclose(x.std(0), 1, atol=1e-4)
    assert np.array_equal(normal.stores[: data.offsets[16]], data.stores[: data.offsets[16]])
    torch_model = create("attention", epochs=3, loss="mixed", per_task=True)
    ensemble = create("ensemble", members=("mlp", "xgb"), epochs=3, validation=0.25).fit(data)
    assert ensemble.score(data)["pca"] > 0.6  # random: 0.5
    ensemble.save(tmp_path / "e.json")
    again = load(tmp_path / "e.json")
    assert np.allclose(again.predict(data), ensemble.predict(data), atol=1e-5)
    assert torch_model.fit(data).score(data)["pca"] > 0.55
