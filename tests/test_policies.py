"""Donor policies: what each picks from a pool of same-class candidates (no TVM build)."""

import dataclasses
import math

import pytest
from tvm import te
from tvm.s_tir import meta_schedule as ms

from transtune.library import Record
from transtune.tasks import Kernel
from transtune.transfer.policies import POLICIES, Candidate, get_policy, shape_distance


def dense(m: int, n: int, k: int) -> Kernel:
    a, b = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[j, r], axis=r), name="C")
    mod = ms.tune_context._normalize_mod(te.create_prim_func([a, b, c]))
    return Kernel(f"dense_{m}_{n}_{k}", "matmul", 1, 2.0 * m * n * k, "", mod)


def cand(wid: int, models: tuple, m: int, n: int, k: int, secs: float) -> Candidate:
    args = [["TENSOR", "float32", [m, k]], ["TENSOR", "float32", [n, k]],
            ["TENSOR", "float32", [m, n]]]  # fmt: skip
    record = Record(wid, wid, "t", [], args, [secs], secs, "tuned", None, None, "x")
    return Candidate(wid, models, 2.0 * m * n * k, record)


@pytest.fixture
def pool():
    return [
        cand(1, ("a",), 16, 64, 64, 1e-3),  # same FLOPs as the kernel, other shapes
        cand(2, ("b",), 8, 64, 64, 4e-4),  # closest shapes, half the FLOPs, fast
        cand(3, ("b", "c"), 64, 64, 64, 1e-4),  # 4x the FLOPs, very fast per FLOP
        cand(4, ("c",), 8, 8, 8, 1e-6),  # tiny, 1 GFLOP/s
    ]


def test_each_policy_orders_and_caps_the_pool(pool):
    kernel = dense(8, 64, 128)  # 2*8*64*128 FLOPs, same as candidate 1
    assert shape_distance(kernel.arg_shapes, pool[1]) == pytest.approx(math.log(2) * 2)
    picks = {
        name: [c.workload_id for c in p([kernel], [pool], 2)[0]] for name, p in POLICIES.items()
    }
    assert picks["shape"] == [2, 1]
    assert picks["flops"] == [1, 2]
    assert picks["speed"] == [3, 4]  # 5.2 and 1.0 GFLOP/s
    # coverage: the kernel's FLOPs count for every model with a candidate; ties go by name,
    # so models a and b are kept and candidate 4 (only in c) is not.
    assert picks["coverage"] == [2, 1]


def test_coverage_prefers_models_covering_heavy_kernels(pool):
    light, heavy = dense(4, 4, 4), dense(64, 64, 256)
    pools = [[pool[0]], [pool[2], pool[3]]]  # a covers only the light kernel
    picks = get_policy("coverage")([light, heavy], pools, 8)
    assert [[c.workload_id for c in p] for p in picks] == [[], [3, 4]]  # models b and c


def test_signature_mismatch_is_infinitely_far_and_unknown_policy_fails(pool):
    odd = cand(5, ("a",), 8, 64, 128, 1e-3)
    odd = Candidate(5, ("a",), odd.flops, dataclasses.replace(odd.record, args_info=[]))
    assert shape_distance(dense(8, 64, 128).arg_shapes, odd) == math.inf
    with pytest.raises(ValueError, match="unknown donor policy"):
        get_policy("nearest")
