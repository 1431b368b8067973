"""Winograd convolution: a lowering that computes 3x3 convolutions with fewer multiply-adds.

Winograd's minimal filtering F(4x4, 3x3) (Lavin and Gray, 2016) computes a stride-1 3x3
convolution on 6x6 tiles of its input: each tile and the weights are transformed into a
domain where the convolution becomes 36 matrix multiplications over channels (one per tile
element), and the products are transformed back into 4x4 output tiles. Its matrix
multiplications do 4x fewer multiply-adds than the direct convolution (a little less where
the tiles overhang the image); the transforms cost memory traffic, and float32 rounding grows
to about 1e-5 relative. The weights' transform is done once, when the model is lowered
(numpy, in float64), so the kernel reads transformed weights as a constant; with prepacked
weights MetaSchedule tiles them for its schedule like any other.

:func:`winograd` rewrites every float32 NHWC convolution with constant HWIO 3x3 weights,
stride 1, no dilation, one group and padding 1, on an image of at least ``MIN_TILES``
output tiles, into TIR computed this way: a
``conv2d_winograd`` kernel (its own kernel class and workloads; MetaSchedule schedules its
data and output transforms by its CPU rules for them, ``conv2d_nhwc_winograd_data_pack`` and
``conv2d_nhwc_winograd_inverse``), with the convolution's elementwise consumers fused after it
as usual. Other convolutions stay direct.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TILE = 4  # output tile side m of F(m x m, 3x3); input tiles are m + 2 wide
# Fewest output tiles for which a convolution is rewritten. Each transformed weight serves
# one multiply-add per tile, and the transformed weights are (m + 2)^2 / 9 = 4x the direct
# ones: on a small image the 36 matrix multiplications are too thin to reuse them. Zen 4,
# 2 threads, 32 candidates each: 7x7x512 (4 tiles) 1.53 ms against 1.03 direct, 28x28x128 (49)
# 0.61-0.76 against 1.03; 14x14x256 (16) was 0.67-1.07, with 9 MiB of weights to stream.
MIN_TILES = 32


def _transform_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, G) of F(m x m, 3x3) in float64, the matrices TVM's Winograd kernels use."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    return _cook_toom_convolution(_interpolation_points(m + 1), m, 3)


def transform_weights(weight: np.ndarray, m: int = TILE) -> np.ndarray:
    """HWIO 3x3 ``weight`` in the Winograd domain: (m + 2, m + 2, in channels, out channels)."""
    _, _, g = _transform_matrices(m)
    packed = np.einsum("ar,bs,rsio->abio", g, g, weight.astype(np.float64))
    return np.ascontiguousarray(packed, dtype=weight.dtype)


def conv2d_winograd_nhwc(data, kernel_pack, m: int = TILE):
    """TE: NHWC ``data`` (padded by 1) convolved by transformed weights ``kernel_pack``
    (:func:`transform_weights`), as F(m x m, 3x3); NHWC output of the input's size."""
    from tvm import te, topi
    from tvm.topi.nn.winograd_util import winograd_transform_matrices

    n, h, w, ci = (int(d) for d in data.shape)
    alpha, _, _, co = (int(d) for d in kernel_pack.shape)
    a_mat, b_mat, _ = winograd_transform_matrices(m, 3, str(data.dtype))
    n_h, n_w = (h + m - 1) // m, (w + m - 1) // m
    tiles = n * n_h * n_w
    # Padding 1 around the image, and after it up to whole input tiles.
    after = (0, (n_h - 1) * m + alpha - h - 1, (n_w - 1) * m + alpha - w - 1, 0)
    data_pad = topi.nn.pad(data, (0, 1, 1, 0), after, name="data_pad",
                           attrs={"schedule_rule": "None"})  # fmt: skip
    input_tile = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: data_pad[p // (n_h * n_w), (p // n_w) % n_h * m + eps,
                                       p % n_w * m + nu, c],
        name="input_tile", attrs={"schedule_rule": "None"},
    )  # fmt: skip
    data_pack = _two_sided(input_tile, b_mat, alpha, "data_pack",
                           "conv2d_nhwc_winograd_data_pack")  # fmt: skip
    rc = te.reduce_axis((0, ci), "rc")
    bgemm = te.compute(
        (alpha, alpha, tiles, co),
        lambda eps, nu, p, k: te.sum(data_pack[eps, nu, p, rc] * kernel_pack[eps, nu, rc, k],
                                     axis=[rc]),
        name="bgemm",
    )  # fmt: skip
    inverse = _two_sided(bgemm, a_mat, m, "inverse", "conv2d_nhwc_winograd_inverse")
    return te.compute(
        (n, h, w, co),
        lambda b, y, x, k: inverse[y % m, x % m, b * n_h * n_w + y // m * n_w + x // m, k],
        name="conv2d_winograd",
    )


def _two_sided(x, mat, size: int, name: str, rule: str):
    """TE: ``mat^T X mat`` for every (p, c) slice ``X = x[:, :, p, c]`` (a tile's transform),
    scheduled by MetaSchedule's CPU rule ``rule``."""
    from tvm import te

    alpha = int(x.shape[0])
    r_a, r_b = te.reduce_axis((0, alpha), "r_a"), te.reduce_axis((0, alpha), "r_b")
    return te.compute(
        (size, size, *x.shape[2:]),
        lambda i, j, p, c: te.sum(x[r_a, r_b, p, c] * mat[r_a, i] * mat[r_b, j], axis=[r_a, r_b]),
        name=name,
        attrs={"schedule_rule": rule},
    )


def eligible(call) -> bool:
    """Whether a ``relax.nn.conv2d`` call is one :func:`winograd` rewrites."""
    from tvm.ir.expr import Constant

    attrs, (data, weight) = call.attrs, call.args
    shape = getattr(data.ty, "shape", None)
    return (
        isinstance(weight, Constant)
        and str(weight.value.dtype) == "float32"
        and str(attrs.out_dtype) in ("", "float32", "void")
        and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NHWC", "HWIO", "NHWC")
        and tuple(weight.value.shape[:2]) == (3, 3)
        and [int(s) for s in attrs.strides] == [1, 1]
        and [int(d) for d in attrs.dilation] == [1, 1]
        and int(attrs.groups) == 1
        and [int(p) for p in attrs.padding] == [1, 1, 1, 1]
        and shape is not None
        and all(isinstance(d, int) or hasattr(d, "value") for d in shape.values)
        and _tiles(int(shape.values[1]), int(shape.values[2])) >= MIN_TILES
    )


def _tiles(height: int, width: int, m: int = TILE) -> int:
    """Output tiles of one image of ``height`` x ``width`` (stride 1, padding 1)."""
    return -(-height // m) * -(-width // m)


def winograd(mod: Any) -> Any:
    """``mod`` (Relax, convolutions in NHWC, before legalization) with its eligible 3x3
    convolutions computed as Winograd's F(4x4, 3x3)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class Winograd(PyExprMutator):
        def visit_call_(self, op):
            call = super().visit_call_(op)
            if not (getattr(call.op, "name", "") == "relax.nn.conv2d" and eligible(call)):
                return call
            packed = relax.const(transform_weights(call.args[1].value.numpy()))
            return self.builder_.call_te(conv2d_winograd_nhwc, call.args[0], packed,
                                         primfunc_name_hint="conv2d_winograd")  # fmt: skip

    mutator_ = Winograd(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator_.builder_.update_func(gv, mutator_.visit_expr(func))
    return mutator_.builder_.get()
