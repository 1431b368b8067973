"""Cost models: metric definitions, splits, and every model learning on a real tiny dataset."""

import numpy as np
import pytest
import torch

from transtune.costmodel import (
    CostModelError,
    TorchConfig,
    TorchCostModel,
    XGBConfig,
    XGBCostModel,
    create,
    evaluate,
    load,
    load_cost_data,
    network_topk,
)
from transtune.costmodel.losses import LOSSES
from transtune.dataset import collect, splits
from transtune.dataset.collection import DatasetKernel
from transtune.dataset.splits import by_hardware, by_model, by_task, within_task
from transtune.frontend import from_module
from transtune.targets import get_config
from transtune.tasks import extract_kernels


def test_metrics_follow_tensets_definitions():
    latency = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    group = np.array([0, 0, 0, 0, 1, 1])
    perfect = -latency
    m = evaluate(perfect, latency, group, ks=(1, 2))
    assert m == {"pca": 1.0, "peak@1": 1.0, "recall@1": 1.0, "peak@2": 1.0, "recall@2": 1.0}
    # Group 0 ranked 2nd, 1st, 4th, 3rd: 4 of 6 pairs right; group 1 reversed: 0 of 1.
    score = np.array([3.0, 4.0, 1.0, 2.0, 1.0, 2.0])
    m = evaluate(score, latency, group, ks=(1,))
    assert m["pca"] == pytest.approx((4 / 6 * 4 + 0 * 2) / 6)
    assert m["peak@1"] == pytest.approx((1 / 2 * 4 + 10 / 20 * 2) / 6)
    assert m["recall@1"] == 0.0
    # peak@k is TenSet's metric_peak_score: the max-curve of normalized throughput over the
    # top-k picks, averaged. Group 0 picks latencies 2, 1, 4: curve 1/2, 1, 1; group 1
    # picks 20, 10: curve 1/2, 1 (fewer than k records: the mean over those it has).
    m = evaluate(score, latency, group, ks=(3,))
    assert m["peak@3"] == pytest.approx(((0.5 + 1 + 1) / 3 * 4 + (0.5 + 1) / 2 * 2) / 6)
    weight = np.array([3, 3, 3, 3, 1, 1])
    assert network_topk(score, latency, group, weight, k=1) == pytest.approx((3 + 10) / (6 + 20))


def test_splits_hold_out_what_they_say():
    workload = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
    target = np.array(["h", "s", "h", "s", "h", "s"], dtype=object)
    train, test = by_model(workload, {"a": ["resnet50"], "b": ["resnet18"], "c": ["bert_tiny"]})
    assert set(workload[test]) == {"a", "c"} and set(workload[train]) == {"b"}
    train, test = by_hardware(target, ["s"])
    assert set(target[test]) == {"s"} and set(target[train]) == {"h"}
    train, test = by_task(workload, 1 / 3, seed=1)
    assert len(set(workload[test])) == 1 and not set(workload[test]) & set(workload[train])
    train, test = within_task(np.repeat(workload, 5), np.repeat(target, 5), 0.2, seed=0)
    assert len(test) == 6 and len(train) == 24


def test_splits_and_cost_models_are_made_by_name():
    class Data:  # what a split reads of a CostData
        workload = np.array(["a", "a", "b", "b", "c", "c"], dtype=object)
        target = np.array(["h", "s", "h", "s", "h", "s"], dtype=object)
        models = {"a": ["resnet50"], "b": ["resnet18"], "c": ["bert_tiny"]}

    def same(x, y):
        return all(np.array_equal(a, b) for a, b in zip(x, y, strict=True))

    assert same(splits.make("by-model", Data), by_model(Data.workload, Data.models))
    assert same(splits.make("by-model", Data, ["resnet18"]), ([0, 1, 4, 5], [2, 3]))
    assert same(splits.make("by-hardware", Data, ["s"]), by_hardware(Data.target, ["s"]))
    assert same(splits.make("by-task", Data, seed=1), by_task(Data.workload, 0.2, 1))
    assert same(splits.make("none", Data), (np.arange(6), np.arange(6)))
    for name, held in (("by-hardware", None), ("by-kernel", None)):
        with pytest.raises(ValueError):
            splits.make(name, Data, held)
    assert create("xgb", seed=3).config.seed == 3
    mlp = create("mlp", seed=1, epochs=2, net={"dim": 8})
    assert (mlp.config.arch, mlp.config.epochs, mlp.config.seed) == ("mlp", 2, 1)
    assert mlp.config.net == {"dim": 8}
    assert create("attention").config.epochs == TorchConfig().epochs
    assert create("ms-mlp", epochs=4).kind == "ms-mlp"
    with pytest.raises(CostModelError, match="one of xgb, mlp"):
        create("svm")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_prefer_the_right_order(name):
    label = torch.tensor([1.0, 0.5, 0.25, 1.0, 0.1])
    group = torch.tensor([7, 7, 7, 900, 900])  # group ids are dataset-wide, not 0..G-1
    right = LOSSES[name](torch.tensor([1.0, 0.5, 0.25, 1.0, 0.1]), label, group)
    wrong = LOSSES[name](torch.tensor([0.25, 0.5, 1.0, 0.1, 1.0]), label, group)
    assert float(right) < float(wrong)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)
    ).eval()
    model = from_module(module, (torch.randn(16, 64),), name="mlp")
    kernels = [
        DatasetKernel(k, ["mlp@b16"], [k.weight])
        for k in extract_kernels(model.mod, get_config("host").tvm_target())
        if "matmul" in k.kernel_class
    ]
    out = tmp_path_factory.mktemp("ds") / "data"
    collect(str(out), kernels, ["host", "host-1core"], per_kernel=16, seed=0)
    return out


@pytest.fixture(scope="module")
def data(dataset_dir):
    return load_cost_data(dataset_dir)


def test_trace_tokens_carry_the_sampled_decisions():
    from transtune.features import KINDS, trace_tokens

    insts = [
        ["GetSBlock", [], ["matmul", "main"], ["b0"]],
        ["GetLoops", ["b0"], [], ["l1", "l2"]],
        ["SamplePerfectTile", ["l1"], [4, 64], ["v3", "v4", "v5", "v6"]],
        ["Split", ["l1", "v3", "v4", "v5", "v6"], [True, False], ["l7", "l8", "l9", "l10"]],
        ["SampleCategorical", [], [[0, 16, 64, 512], [0.25] * 4], ["v11"]],
        ["Annotate", ["b0", "v11"], ["meta_schedule.unroll_explicit"], []],
        ["RFactor", ["l2"], [0], ["b12"]],
    ]
    kinds, values = trace_tokens(insts, [[2, [2, 1, 8, 4]], [4, 2]])
    assert [KINDS[k] for k in kinds] == ["SamplePerfectTile", "SampleCategorical", "RFactor"]
    assert values[0].tolist() == [1, 0, 3, 2, 0, 0, 6, 4]  # log2 factors, log2 extent, count
    assert values[1, 0] == pytest.approx(np.log2(65))  # the chosen unroll depth, 64
    assert values[2, 7] == 1  # a structural step: its number of inputs


def test_cost_data_rows_keep_their_trace_tokens(data):
    from transtune.features import KINDS

    tiles = KINDS.index("SamplePerfectTile")
    counts = [int((k == tiles).sum()) for k, _ in data.tokens(np.arange(len(data)))]
    assert min(counts) >= 2  # a matmul's tiled loops
    rows = np.array([5, 0, 3])
    taken = data.take(rows).tokens(np.arange(3))
    for (k, v), (k2, v2) in zip(taken, data.tokens(rows), strict=True):
        assert np.array_equal(k, k2) and np.array_equal(v, v2)


def test_cost_data_labels_are_normalized_throughput(data):
    assert len(data) > 20 and data.stores.shape[1] == 164
    for g in np.unique(data.group):
        rows = data.group == g
        assert data.label[rows].max() == pytest.approx(1.0)
        assert data.label[rows].min() > 0


def test_cost_data_reads_the_dataset_as_it_was_at_a_time(dataset_dir, data):
    import pyarrow.compute as pc

    from transtune.dataset import load_records

    records = load_records(dataset_dir, ["status", "collected"])[0]
    ok = records.filter(pc.equal(records["status"], "ok"))["collected"].to_numpy()
    middle = float(np.median(ok))
    early = load_cost_data(dataset_dir, collected_before=middle)
    assert 0 < len(early) == int((ok < middle).sum()) < len(data)
    assert len(load_cost_data(dataset_dir, collected_before=float(ok.max()) + 1)) == len(data)


@pytest.mark.parametrize(
    "model",
    [
        XGBCostModel(XGBConfig(n_estimators=40)),
        TorchCostModel(TorchConfig(arch="mlp", loss="pairwise", epochs=200, lr=1e-3)),
        TorchCostModel(TorchConfig(arch="attention", loss="pairwise", epochs=200)),
    ],
    ids=["xgb", "mlp", "attention"],
)
def test_each_model_learns_and_round_trips(data, model, tmp_path):
    model.fit(data)
    scores = model.score(data)
    assert scores["pca"] > 0.72, scores  # on its own training data (random: 0.5)
    path = tmp_path / "model.json"
    model.save(path)
    again = load(path)
    assert again.classes == data.classes and again.config == model.config
    np.testing.assert_allclose(again.predict(data), model.predict(data), rtol=1e-5, atol=1e-6)


def test_class_ids_mean_the_same_classes_on_another_dataset(data):
    from dataclasses import replace

    assert len(data.classes) >= 2
    model = TorchCostModel(TorchConfig(epochs=1)).fit(data)
    order = list(reversed(range(len(data.classes))))  # the other dataset lists them reversed
    other = replace(
        data, classes=[data.classes[i] for i in order],
        kernel_class=np.asarray([order.index(c) for c in data.kernel_class], np.int32),
    )  # fmt: skip
    assert np.allclose(model.predict(other), model.predict(data))


def test_loading_something_else_fails_clearly(tmp_path):
    (tmp_path / "x.json").write_text('{"kind": "xgb", "format": 99, "config": {}}')
    with pytest.raises(CostModelError, match="format 99"):
        load(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("not json")
    with pytest.raises(CostModelError, match="not a transtune cost model"):
        load(tmp_path / "y.json")


def test_cli_trains_and_evaluates_on_a_split(dataset_dir, tmp_path, capsys):
    from transtune.cli import main

    ckpt = str(tmp_path / "xgb.json")
    split = ["--split", "by-hardware", "--hold-out", "host-1core"]
    assert main(["costmodel", "train", str(dataset_dir), ckpt, "--model", "xgb", *split]) == 0
    assert main(["costmodel", "eval", str(dataset_dir), ckpt, *split]) == 0
    out = capsys.readouterr().out
    assert "pca" in out and "peak@1" in out and "by-hardware" in out
    # The checkpoint guides MetaSchedule's search.
    from transtune.frontend import export_onnx

    onnx = tmp_path / "mlp.onnx"
    module = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU()).eval()
    export_onnx(from_module(module, (torch.randn(8, 64),)), onnx, dynamo=False)
    lib = f"sqlite:///{tmp_path}/lib.db"
    argv = ["tune", str(onnx), "--library", lib, "--trials", "8", "--batch-size", "8"]
    assert main([*argv, "--cost-model", ckpt]) == 0
    assert "8 new trials" in capsys.readouterr().out


def matmul_48():
    """A 48x48 matmul's IRModule, as MetaSchedule tunes it."""
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    a, b = te.placeholder((48, 48), name="A"), te.placeholder((48, 48), name="B")
    r = te.reduce_axis((0, 48), name="k")
    c = te.compute((48, 48), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return ms.tune_context._normalize_mod(te.create_prim_func([a, b, c]))


def test_schedule_tokens_read_off_the_trace_match_its_json():
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule, Trace

    from transtune.features import schedule_tokens, trace_tokens
    from transtune.library import plain
    from transtune.schedules import strip_postproc

    mod = matmul_48()
    context = ms.TuneContext(mod=mod, target=get_config("host").tvm_target(),
                             space_generator="post-order-apply")  # fmt: skip
    checked = 0
    for seed in range(6):
        for space in context.generate_design_space():
            sch = Schedule(mod, seed=seed + 1)  # the space's steps with fresh decisions
            Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()  # as the search does: postprocessing is left out of tokens
            if not all(p.apply(sch) for p in context.space_generator.postprocs):
                continue
            kinds, values = schedule_tokens(sch)
            json_kinds, json_values = trace_tokens(
                *strip_postproc(plain(sch.trace.as_json(remove_postproc=True)))
            )
            assert len(kinds) >= 3
            assert np.array_equal(kinds, json_kinds) and np.array_equal(values, json_values)
            checked += 1
    assert checked >= 6


@pytest.mark.parametrize(
    "kind",
    ["xgb", pytest.param("attention", marks=pytest.mark.slow)],  # the same adapter
)
def test_a_trained_model_guides_metaschedule_and_learns_online(data, tmp_path, kind):
    from transtune.costmodel.metaschedule import LearnedCostModel
    from transtune.library import open_library
    from transtune.tasks import Kernel
    from transtune.tuning import GUIDED_SEARCH, tune_kernels

    if kind == "xgb":
        model = XGBCostModel(XGBConfig(n_estimators=20)).fit(data)
        trees = model.booster.num_boosted_rounds()
        learned = lambda: model.booster.num_boosted_rounds() > trees  # noqa: E731
    else:  # reads the candidates' trace tokens too
        model = TorchCostModel(TorchConfig(epochs=2)).fit(data)
        before = [p.detach().clone() for p in model.net.parameters()]
        learned = lambda: any(  # noqa: E731
            not torch.equal(a, b) for a, b in zip(before, model.net.parameters(), strict=True)
        )
    guide = LearnedCostModel(model, data.hardware[0], update_steps=5)
    scored = []
    predict = guide._inst.predict
    guide._inst.predict = lambda context, candidates: (
        scored.append(len(candidates)) or predict(context, candidates)
    )
    kernel = Kernel("mm", "matmul", 1, 2 * 48**3, "", matmul_48())
    with open_library(tmp_path / "lib.db") as lib:
        result = tune_kernels([kernel], lib, get_config("host"), "mm", trials=16,
                              num_trials_per_iter=8, cost_model=guide,
                              search=GUIDED_SEARCH)  # fmt: skip
        assert result.new_trials == 16 and lib.count_records() == 16
    assert len(guide.seen) == 16  # every measured candidate reached update()
    assert learned()  # and the model learned from them
    # The search scored populations of GUIDED_SEARCH's size, not MetaSchedule's 512.
    assert max(scored) <= GUIDED_SEARCH["population_size"] < 512


@pytest.mark.slow  # about 60 s; the gate's rule is tested below (make test-slow)
def test_a_trained_model_picks_which_transferred_schedules_to_measure(data, tmp_path, monkeypatch):
    from transtune.costmodel.metaschedule import LearnedCostModel
    from transtune.library import open_library, target_key
    from transtune.transfer import postprocessors, replay, transfer_tune
    from transtune.transfer.search import find_candidates
    from transtune.tuning import tune

    def mlp(width: int, name: str):
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU()).eval()
        return from_module(module, (torch.randn(16, 64),), name=name)

    guide = LearnedCostModel(XGBCostModel(XGBConfig(n_estimators=20)).fit(data), data.hardware[0])
    target = get_config("host").tvm_target()
    with open_library(tmp_path / "lib.db") as lib:
        for width in (32, 128):  # two donors of the new kernel's class
            tune(mlp(width, f"donor{width}"), lib, "host", trials=8, num_trials_per_iter=8)
        new = mlp(64, "new")
        result = transfer_tune(new, lib, "host", cost_model=guide, measure_top=1)
        (k,) = [k for k in result.kernels if k.kernel.kernel_class == "matmul+add+relu"]
        assert k.tried == 2 and k.ranked_out == 1 and len(k.measured) == 1
        assert k.best_secs < k.untuned_secs
        # The one measured is the one the model scores higher on the new kernel.
        pool = find_candidates(lib, k.kernel, "new", target_key(target))
        postprocs = postprocessors(k.kernel.mod, target)
        schedules = [replay(c.record.trace, k.kernel.mod, postprocs).schedule for c in pool]
        scores = guide.score_schedules(k.kernel.mod, target, schedules)
        assert list(k.measured) == [pool[int(np.argmax(scores))].workload_id]
        assert scores.max() > scores.min()
        # By default a model that never saw this CPU gates nothing: both are measured (where
        # one that did would let MEASURE_TOP through).
        monkeypatch.setattr("transtune.transfer.search.MEASURE_TOP", 1)
        guide.model.trained_on = ["another-cpu-2c"]
        result = transfer_tune(new, lib, "host", cost_model=guide)
        (k,) = [k for k in result.kernels if k.kernel.kernel_class == "matmul+add+relu"]
        assert k.tried == 2 and k.ranked_out == 0 and len(k.measured) == 2


def test_only_a_cost_model_trained_on_the_cpu_gates_donor_schedules(data):
    from transtune.costmodel.metaschedule import LearnedCostModel
    from transtune.machine import cpu_of
    from transtune.transfer.search import MEASURE_TOP, measured_per_kernel

    host = get_config("host")
    guide = LearnedCostModel(XGBCostModel(XGBConfig(n_estimators=2)).fit(data), data.hardware[0])
    assert host.name in guide.trained_on  # the test dataset was measured here
    assert measured_per_kernel(guide, host, None) == MEASURE_TOP
    assert measured_per_kernel(guide, host, 5) == 5
    assert measured_per_kernel(None, host, None) is None
    assert measured_per_kernel(None, host, 5) == 5  # the sampled stage's count
    guide.model.trained_on = [f"{cpu_of(host.name)}-64c-avx2"]  # this CPU, another config
    assert measured_per_kernel(guide, host, None) == MEASURE_TOP
    guide.model.trained_on = ["another-cpu-2c"]
    assert measured_per_kernel(guide, host, None) is None  # every replayed one
