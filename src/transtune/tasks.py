"""Kernel extraction: the tuning tasks of a model, each with a shape-independent class.

Kernel class rule
-----------------
TVM legalizes each Relax operator into a TIR function named after the operator
(``conv2d``, ``add``, ``max_pool2d``...), making names unique with numeric suffixes
(``conv2d3``, ``add4``), then fuses chains of them into ``fused_<name>_<name>...`` kernels. The
class of a kernel is the ordered list of the operators it fuses, each with its numeric suffix
removed, joined by ``+``: ``fused_conv2d3_add4_relu1`` -> ``conv2d+add+relu``. It is read from
the fused function's body (its ``call_tir`` callees), not parsed from the name, so operators
whose own names contain ``_`` (``max_pool2d``, ``layer_norm``) stay whole. An unfused kernel's
class is its operator name. Classes ignore shapes, layouts and dtypes by design: kernels of one
class in different models are the candidates for exchanging schedules (records are keyed by
layout, so donors never cross layouts).

Kernels are extracted for a target configuration (:class:`transtune.targets.TargetConfig`),
whose layout convolutions are converted to first (or a bare TVM target: NCHW).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_SUFFIX = re.compile(r"\d+$")


def op_name(func_name: str) -> str:
    """Operator name of a legalized TIR function: its name without TVM's uniquifying number."""
    return _SUFFIX.sub("", func_name) or func_name


def kernel_class(callees: list[str]) -> str:
    """Class of a kernel fusing the TIR functions ``callees``, in order."""
    return "+".join(op_name(name) for name in callees)


@dataclass
class Kernel:
    """One tuning task: a TIR kernel of a model, with how often the model runs it."""

    name: str
    kernel_class: str
    weight: int
    flops: float
    workload_hash: str
    mod: Any = field(repr=False)  # tvm.IRModule with one PrimFunc "main"

    @property
    def arg_shapes(self) -> list[tuple[int, ...]]:
        from tvm.s_tir import meta_schedule as ms

        func = self.mod["main"]
        return [tuple(int(d) for d in a.shape) for a in ms.arg_info.ArgInfo.from_prim_func(func)]

    @property
    def shape_summary(self) -> str:
        """``in1, in2 -> out`` shapes, e.g. ``1x64x56x56, 64x64x3x3 -> 1x64x56x56``."""
        shapes = ["x".join(map(str, s)) or "scalar" for s in self.arg_shapes]
        return f"{', '.join(shapes[:-1])} -> {shapes[-1]}" if len(shapes) > 1 else shapes[0]


def lowering(config) -> tuple[Any, str, bool]:
    """(TVM target, layout, prepacked weights) of a target configuration, or of a bare TVM
    target (NCHW, weights as given)."""
    if hasattr(config, "tvm_target"):
        return config.tvm_target(), config.layout, config.prepack
    return config, "NCHW", False


def preprocess(mod, config) -> tuple[Any, dict[str, str]]:
    """Lower a Relax module to fused TIR kernels, the way MetaSchedule expects to find them.

    Batch norm is folded into convolutions first, convolutions are converted to the
    configuration's layout (weights folded into it, activations transposed where the model's
    layout starts or ends), then ops are decomposed for inference, legalized and fused. Gathers
    (``take``) clip their indices: TVM's default "fast" mode reads out of bounds (and crashes)
    on the random inputs every kernel is measured with. Before a layout conversion, ``clip``
    (ReLU6) is spelled ``maximum`` then ``minimum``: ``ConvertLayout`` has no rule for it and
    would wrap it in a transpose pair, a kernel of its own instead of the convolution's
    epilogue. With fast math, transcendentals are rewritten after the layout conversion
    (:func:`transtune.fastmath.fast_math`; the TIR it emits is opaque to it), and so are
    Winograd's convolutions (:func:`transtune.winograd.winograd`). With prepacked
    weights, every
    kernel's weights are marked free to change layout (MetaSchedule's ``RewriteLayout`` then
    tiles them for the schedule; :func:`transtune.compile.compile_model` folds the repacking
    into the constants). Returns the fused module and the class of every fused kernel.
    """
    import tvm
    from tvm import relax

    from .machine import configure_threads
    from .targets import LAYOUTS

    configure_threads()  # constant folding runs kernels: TVM's pool starts here
    target, layout, prepack = lowering(config)
    passes = relax.transform
    mod = _rewrite_calls(mod, "relax.take", _clip_indices)
    convert = []
    if layout != "NCHW":
        mod = _rewrite_calls(mod, "relax.clip", _min_max)
        desired = {"relax.nn.conv2d": [layout, LAYOUTS[layout]]}
        convert = [passes.ConvertLayout(desired), passes.FoldConstant()]
    with target:
        mod = tvm.transform.Sequential(
            [passes.FoldBatchnormToConv2D(), passes.FoldConstant(), *convert]
        )(mod)
    if getattr(config, "winograd", False):
        from .winograd import winograd

        mod = winograd(mod)
    if getattr(config, "fast_math", False):
        from .fastmath import fast_math

        mod = fast_math(mod)
    with target:
        mod = tvm.transform.Sequential(
            [
                passes.DecomposeOpsForInference(),
                passes.CanonicalizeBindings(),
                passes.LegalizeOps(),
                passes.AnnotateTIROpPattern(),
                passes.FoldConstant(),
                passes.FuseOps(),
            ]
        )(mod)
        classes = {
            gv.name_hint: kernel_class(_callees(func))
            for gv, func in mod.functions.items()
            if isinstance(func, relax.Function) and func.attrs and "Primitive" in func.attrs
        }
        mod = passes.FuseTIR()(mod)
        if prepack:  # the pass gives the kernels it marks new names: keep their classes
            before = _callees(mod["main"])
            mod = passes.AttachAttrLayoutFreeBuffers()(mod)
            for new, old in zip(_callees(mod["main"]), before, strict=True):
                if old in classes:
                    classes.setdefault(new, classes[old])
    return mod, classes


def multiply_add_flops(kernel_mod) -> float:
    """2 x the iterations of a kernel's reduction blocks (a convolution's or matmul's
    multiply-adds): the work a CPU's FMA peak bounds. TVM's ``estimate_tir_flops`` counts every
    float operation, an epilogue's too (fast math's polynomial, clamps and rounding per
    element), so against the peak it can exceed 100%."""
    from tvm import tirx

    total = 0

    def visit(node) -> None:
        nonlocal total
        iters = getattr(node, "iter_vars", None)
        if iters is not None and any(v.iter_type == tirx.IterVar.CommReduce for v in iters):
            n = 1
            for v in iters:
                n *= int(v.dom.extent)
            total += 2 * n
        for name in ("body", "block", "then_case", "else_case"):
            child = getattr(node, name, None)
            if child is not None:
                visit(child)
        for child in getattr(node, "seq", None) or []:
            visit(child)

    for func in kernel_mod.functions.values():
        visit(func.body)
    return float(total)


def _rewrite_calls(mod, op: str, rewrite):
    """``mod`` with every call of the Relax operator ``op`` replaced by ``rewrite(call)`` (or
    kept where that returns None)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    target = tvm.ir.Op.get(op)

    @mutator
    class Rewrite(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            new = rewrite(call) if call.op.same_as(target) else None
            return call if new is None else new

    mod = mod.clone()
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = Rewrite().visit_expr(func)
    return mod


def _clip_indices(call):
    """A ``take`` in "fast" mode as one in "clip" mode."""
    from tvm import relax

    if call.attrs.mode == "fast":
        return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
    return None


def _min_max(call):
    """``clip(x, lo, hi)`` as ``minimum(maximum(x, lo), hi)``."""
    from tvm import relax

    x, *bounds = call.args
    low, high = (relax.const(float(b.value), str(x.ty.dtype)) for b in bounds)
    return relax.op.minimum(relax.op.maximum(x, low), high)


def _callees(func) -> list[str]:
    from tvm import ir, relax

    call_tir = ir.Op.get("relax.call_tir")
    names: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            names.append(expr.args[0].name_hint)

    relax.analysis.post_order_visit(func.body, visit)
    return names


def workload_hash(mod) -> str:
    """Structural hash of a kernel module, exactly as MetaSchedule's databases key workloads."""
    return workload_json(mod)[0]


def workload_json(mod) -> list[str]:
    """A kernel module in MetaSchedule's workload form: [structural hash, base64 module]."""
    from tvm.s_tir import meta_schedule as ms

    shash, b64 = ms.database.Workload(mod).as_json()
    return [str(shash), str(b64)]


def workload_mod(workload: list):
    """The kernel module of a workload in MetaSchedule's JSON form (:func:`workload_json`)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.database.Workload.from_json(workload).mod


def arg_info_json(mod) -> list:
    """The arguments of a kernel module as MetaSchedule records them (shape and dtype each)."""
    from tvm.s_tir import meta_schedule as ms

    return [a.as_json() for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


def same_kernel(a, b) -> bool:
    """Whether two kernel modules are structurally equal (what one workload means)."""
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def extract_kernels(mod, config) -> list[Kernel]:
    """The tuning kernels of a Relax module (raw, as imported) for a target configuration
    (or a ``tvm.target.Target``: NCHW).

    Identical kernels are merged; ``weight`` counts their occurrences in the model.
    """
    from tvm.s_tir import analysis
    from tvm.s_tir import meta_schedule as ms

    fused, classes = preprocess(mod, config)
    target = lowering(config)[0]
    kernels = []
    for task in ms.relax_integration.extract_tasks(fused, target):
        kernel_mod = task.dispatched[0]
        kernels.append(
            Kernel(
                name=task.task_name,
                kernel_class=classes.get(task.task_name, op_name(task.task_name)),
                weight=int(task.weight),
                flops=float(analysis.estimate_tir_flops(kernel_mod)),
                workload_hash=workload_hash(kernel_mod),
                mod=kernel_mod,
            )
        )
    return kernels
