"""Transfer-tuning: candidates by class, replay with failures and re-fits, numerics gate,
and an end-to-end transfer between two tiny models."""

import numpy as np
import pytest
import torch
from tvm import te
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from transtune.compile import compile_model
from transtune.frontend import from_module
from transtune.library import open_library, plain, target_key
from transtune.library.database import LibraryDatabase
from transtune.measure import NumericsCheck, load_cpu_tensor_intrinsics
from transtune.targets import get_config
from transtune.transfer import (
    postprocessors,
    replay,
    strip_postproc,
    transfer_tune,
    zero_measurement_seconds,
)
from transtune.tuning import tune


def matmul(m: int, n: int, k: int, transpose_b: bool = False):
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((n, k) if transpose_b else (k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    if transpose_b:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[j, r], axis=r), name="C")
    else:
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return ms.tune_context._normalize_mod(te.create_prim_func([a, b, c]))


def conv(n: int = 1, c: int = 8, hw: int = 8):
    data = te.placeholder((n, c, hw, hw), name="data")
    weight = te.placeholder((c, c, 3, 3), name="w")
    rc, ry, rx = te.reduce_axis((0, c)), te.reduce_axis((0, 3)), te.reduce_axis((0, 3))
    out = te.compute(
        (n, c, hw - 2, hw - 2),
        lambda b, o, y, x: te.sum(
            data[b, rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    return ms.tune_context._normalize_mod(te.create_prim_func([data, weight, out]))


@pytest.fixture(scope="module")
def target():
    load_cpu_tensor_intrinsics()
    return get_config("host").tvm_target()


def sampled_trace(mod, target, seed: int = 1):
    """A real MetaSchedule candidate: a design space with sampled decisions, post-processed."""
    ctx = ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", rand_state=seed
    )
    space = ctx.generate_design_space()[0]
    new = Schedule(mod, seed=seed)
    space.trace.apply_to_schedule(new, remove_postproc=True)
    new.enter_postproc()
    for postproc in ctx.space_generator.postprocs:
        assert postproc.apply(new)
    return plain(new.trace.as_json())


def test_strip_postproc_cuts_at_the_marker(target):
    trace = sampled_trace(matmul(32, 32, 32), target)
    kinds = [inst[0] for inst in trace[0]]
    assert "EnterPostproc" in kinds
    stripped = strip_postproc(trace)
    assert [inst[0] for inst in stripped[0]] == kinds[: kinds.index("EnterPostproc")]


def test_replay_on_same_class_other_shapes(target):
    trace = sampled_trace(matmul(64, 64, 64), target)
    for shape in [(64, 64, 64), (32, 128, 64), (48, 80, 96)]:
        mod = matmul(*shape)
        result = replay(trace, mod, postprocessors(mod, target))
        assert result.schedule is not None, result.error
    same = replay(trace, matmul(64, 64, 64), postprocessors(matmul(64, 64, 64), target))
    assert not same.refitted
    odd = replay(trace, matmul(48, 80, 96), postprocessors(matmul(48, 80, 96), target))
    assert odd.refitted  # 48/80/96 do not take the 64-extent tiles as they are


def test_replay_failure_is_reported_not_raised(target):
    trace = sampled_trace(matmul(32, 32, 32), target)
    mod = conv()
    result = replay(trace, mod, postprocessors(mod, target))
    assert result.schedule is None and result.error


def test_numerics_gate_rejects_a_wrong_kernel(target, tmp_path):
    import tvm

    right, wrong = matmul(16, 16, 16), matmul(16, 16, 16, transpose_b=True)
    check = NumericsCheck(right, target, 1e-3)
    for mod, ok in ((right, True), (wrong, False)):
        path = str(tmp_path / f"{ok}.so")
        tvm.compile(mod, target=target).export_library(path)
        verdict = check(mod, path)
        assert (verdict is None) == ok, verdict


def mlp(inp: int, out: int, batch: int, name: str):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(inp, out), torch.nn.ReLU()).eval()
    return from_module(module, (torch.randn(batch, inp),), name=name)


@pytest.mark.slow  # about 70 s: tune a donor, transfer; the cascade tests below cover each stage
def test_end_to_end_transfer_between_two_tiny_models(tmp_path):
    donor, new = mlp(64, 64, 16, "donor_mlp"), mlp(96, 48, 8, "new_mlp")
    with open_library(tmp_path / "lib.db") as lib:
        tune(donor, lib, "host", trials=16, num_trials_per_iter=8)
        result = transfer_tune(new, lib, "host", max_candidates=4)
        (k,) = [k for k in result.kernels if k.kernel.kernel_class == "matmul+add+relu"]
        assert k.tried == 1 and k.donor.startswith("donor_mlp")
        (donor_wid,) = k.chosen["shape"]
        assert k.measured == {donor_wid: k.best_secs}
        assert k.best_secs < k.untuned_secs
        assert result.estimated_latency < result.untuned_latency
        records = lib._query(
            "SELECT provenance, donor, run_id FROM records WHERE provenance = 'transferred'"
        )
        assert records == [("transferred", k.donor, f"transfer:new_mlp:{get_config('host').name}")]
        (run,) = lib._query("SELECT kind, model, finished FROM runs WHERE run_id LIKE 'transfer%'")
        assert run[:2] == ("transfer", "new_mlp") and run[2] is not None
        compiled = compile_model(new, "host", LibraryDatabase(lib, get_config("host")))
        assert compiled.missing_records == []
        expected = new.torch_module(*new.torch_inputs()).detach().numpy()
        np.testing.assert_allclose(compiled.run(new.inputs)[0], expected, rtol=1e-4, atol=1e-5)
        # Donors can be restricted: no donor from an unknown model, so nothing is tried.
        again = transfer_tune(new, lib, "host", donors=["resnet18"])
        assert all(k.tried == 0 for k in again.kernels)
        assert not again.fully_tuned(lib)  # it has transferred records only
        # A model with the donor's very kernel gets that workload's tuned schedule as the
        # first candidate (an exact match), then new_mlp's transferred one, under every policy.
        twin = transfer_tune(mlp(64, 64, 16, "twin_mlp"), lib, "host", policy=["shape", "speed"])
        (t,) = [k for k in twin.kernels if k.kernel.kernel_class == "matmul+add+relu"]
        assert t.chosen["shape"] == [
            lib.find_workload(t.kernel.mod),
            lib.find_workload(k.kernel.mod),
        ]
        assert sorted(t.chosen["speed"]) == sorted(t.chosen["shape"]) == sorted(t.measured)
        assert twin.fully_tuned(lib)
        # No record for the AVX2-only configuration: the host's schedules are the (marked)
        # fallback, and what wins is committed for the AVX2 target.
        avx2 = transfer_tune(new, lib, "host-avx2", max_candidates=1)
        (a,) = [k for k in avx2.kernels if k.kernel.kernel_class == "matmul+add+relu"]
        assert a.tried == a.fallback == 1
        assert a.donor is None or "@" in a.donor  # marked with the target it was tuned for
        # ...and checked against the kernel's own sampled programs, which a win by a schedule
        # of the kernel's own target is not.
        assert a.sampled > 0
        assert t.stage != "transfer" or t.sampled == 0
        # Records are kept per layout: NCHW schedules are no fallback for an NHWC lowering.
        nhwc = transfer_tune(new, lib, get_config("host", "nhwc"), max_candidates=1)
        assert all(k.tried == 0 for k in nhwc.kernels)


class _ExporterSpelled(torch.nn.Module):
    """A residual bias add and a GELU written out as erf arithmetic, the way ONNX exporters
    spell them: kernel classes no tuned model has (``matmul+add+add``, ``matmul+add+...erf``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)

    def forward(self, x):
        h = self.fc1(x) + x
        y = self.fc2(h)
        return 0.5 * y * (1.0 + torch.erf(y / 1.4142135623730951))


def test_anchor_stage_gives_other_classes_a_donor_schedule(tmp_path, target):
    torch.manual_seed(0)
    model = from_module(_ExporterSpelled().eval(), (torch.randn(16, 64),), name="spelled")
    with open_library(tmp_path / "lib.db") as lib:
        tune(mlp(64, 64, 16, "donor_mlp"), lib, "host", trials=16, num_trials_per_iter=8)
        result = transfer_tune(model, lib, "host", sample=0)
        matmuls = [k for k in result.kernels if k.kernel.kernel_class.startswith("matmul")]
        assert len(matmuls) == 2 and "matmul+add+relu" not in {
            k.kernel.kernel_class for k in matmuls
        }
        for k in matmuls:
            assert k.stage == "anchor", (k.kernel.kernel_class, k.errors)
            assert k.donor.startswith("donor_mlp") and k.donor.endswith("~anchor")
            assert k.best_secs < k.untuned_secs
        compiled = compile_model(model, "host", LibraryDatabase(lib, get_config("host")))
        expected = model.torch_module(*model.torch_inputs()).detach().numpy()
        np.testing.assert_allclose(compiled.run(model.inputs)[0], expected, rtol=1e-4, atol=1e-5)
        resumed = transfer_tune(model, lib, "host", sample=0, resume=True)
        assert [k.stage for k in resumed.kernels] == [k.stage for k in result.kernels]
        # The paper's protocol (one named donor, same-class replay only): no donor has these
        # classes, so nothing is tried and the kernels stay at the naive build.
        paper = transfer_tune(model, lib, "host", donors=["donor_mlp"], sample=0, anchor=False)
        assert all(k.stage == "untuned" and k.tried == 0 for k in paper.kernels)
        # An anchor win is weak evidence: the sampled stage runs after it, the faster wins.
        both = transfer_tune(model, lib, "host", sample=8)
        for k in (k for k in both.kernels if k.kernel.kernel_class.startswith("matmul")):
            assert k.sampled == 8 and k.stage in ("anchor", "sampled"), k.errors
            assert k.best_secs <= min(s for s in k.measured.values() if s is not None)
            assert (k.donor is None) == (k.stage == "sampled")


def test_anchor_replay_of_another_anchor_is_reported_not_raised(target):
    from transtune.schedules import anchor_block, replay_anchor

    donor, kernel = matmul(32, 32, 32), conv()
    assert (anchor_block(donor), anchor_block(kernel)) == ("C", "conv")
    trace = sampled_trace(donor, target)
    result = replay_anchor(trace, donor, kernel, target, postprocessors(kernel, target))
    assert result.schedule is None and result.error


def test_imported_records_serve_as_anchor_donors(tmp_path, target):
    from transtune.tasks import Kernel
    from transtune.transfer.search import AnchorDonors

    config = get_config("host")
    with open_library(tmp_path / "lib.db") as lib:
        wid = lib.add_workload(matmul(32, 32, 32))  # as `library import` adds it: no class
        lib.add_record(wid, config, sampled_trace(matmul(32, 32, 32), target), [1e-5])
        kernel = Kernel("k", "matmul+add", 1, 2 * 48**3, "h", matmul(48, 48, 48))
        (candidate,) = AnchorDonors(lib, target_key(config), "new").candidates(kernel, 8)
        assert candidate.models == ("imported",) and candidate.donor.endswith("~anchor")
        other = Kernel("c", "conv2d", 1, 1.0, "h", conv())  # another anchor block: none
        assert AnchorDonors(lib, target_key(config), "new").candidates(other, 8) == []
        # A CPU with no records of its own gets other CPUs' anchor donors, marked fallback
        # (as the same-class pool does), not none.
        avx2 = target_key(get_config("host-avx2"))
        (fallback,) = AnchorDonors(lib, avx2, "new").candidates(kernel, 8)
        assert fallback.fallback and "@" in fallback.donor and fallback.donor.endswith("~anchor")


def test_a_grouped_conv_without_donors_gets_a_sampled_schedule(tmp_path):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3, padding=1, groups=8)).eval()
    model = from_module(module, (torch.randn(1, 64, 28, 28),), name="grouped")
    with open_library(tmp_path / "lib.db") as lib:
        result = transfer_tune(model, lib, "host", sample=16)
        (k,) = [k for k in result.kernels if k.kernel.kernel_class.startswith("conv2d")]
        assert k.tried == 0 and k.sampled > 0 and k.stage == "sampled" and k.sampled_timed > 0
        assert k.best_secs < k.untuned_secs and k.donor is None
        (provenance,) = lib._query("SELECT DISTINCT provenance FROM records")
        assert provenance == ("sampled",)
        compiled = compile_model(model, "host", LibraryDatabase(lib, get_config("host")))
        assert compiled.missing_records == []
        expected = model.torch_module(*model.torch_inputs()).detach().numpy()
        np.testing.assert_allclose(compiled.run(model.inputs)[0], expected, rtol=1e-4, atol=1e-4)
        # Resumed (after an interruption, say): the committed winner is kept, not re-measured.
        count = lib.count_records()
        resumed = transfer_tune(model, lib, "host", sample=16, resume=True)
        (r,) = [r for r in resumed.kernels if r.kernel.name == k.kernel.name]
        assert (r.stage, r.sampled, r.best_secs) == ("sampled", 0, k.best_secs)
        assert lib.count_records() == count
        # The zero-measurement baseline draws the same way and records nothing.
        (default,) = zero_measurement_seconds([k.kernel], get_config("host"), [k.untuned_secs],
                                              sample=16)  # fmt: skip
        assert default < k.untuned_secs and lib.count_records() == count
    # With sampling off and no donor, nothing is tried: the kernel stays at the naive build.
    with open_library(tmp_path / "empty.db") as empty:
        again = transfer_tune(model, empty, "host", sample=0)
        assert [k.stage for k in again.kernels] == ["untuned"] * len(again.kernels)
