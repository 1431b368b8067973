"""Fast math: a lowering that computes transcendentals with TVM's vectorisable approximations.

LLVM on x86 has no vector ``exp``, ``erf`` or ``tanh``: a kernel that calls them makes one
scalar libm call per element, 10-60x slower than TVM's polynomial approximations
(``topi.fast_exp``, ``fast_erf``, ``fast_tanh``; absolute error about 1e-6 in float32). In
BERT the GELU and softmax kernels alone took more than a third of the model's time.

:func:`fast_math` rewrites the float32 Relax operators that reach those functions (``exp``,
``erf``, ``tanh``, ``sigmoid``, ``nn.softmax``, ``nn.gelu``, ``nn.gelu_tanh``, ``nn.silu``)
into TIR built on the approximations, before the rest are legalized. Each kernel keeps its
operator's name, hence its class (:mod:`transtune.tasks`); the rewritten kernels are other
workloads, so a library keeps their records apart without a key of their own, and kernels
without transcendentals are the same programs (and records) either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _rules() -> dict[str, tuple[str, Callable]]:
    """Relax operator -> (TIR function name, as TVM's legalization names it; TE compute on
    the fast approximations)."""
    from tvm import topi

    def sigmoid(x):
        return topi.divide(1.0, topi.add(1.0, topi.fast_exp(topi.negative(x))))

    def gelu(x):
        erf = topi.fast_erf(topi.multiply(x, 1 / math.sqrt(2)))
        return topi.multiply(x, topi.add(0.5, topi.multiply(erf, 0.5)))

    def gelu_tanh(x):
        inner = topi.multiply(topi.add(x, topi.multiply(0.044715, topi.power(x, 3.0))),
                              math.sqrt(2 / math.pi))  # fmt: skip
        return topi.multiply(topi.multiply(x, 0.5), topi.add(1.0, topi.fast_tanh(inner)))

    return {
        "relax.exp": ("tir_exp", topi.fast_exp),
        "relax.erf": ("erf", topi.fast_erf),
        "relax.tanh": ("tir_tanh", topi.fast_tanh),
        "relax.sigmoid": ("tir_sigmoid", sigmoid),
        "relax.nn.softmax": ("softmax", topi.nn.fast_softmax),
        "relax.nn.gelu": ("gelu", gelu),
        "relax.nn.gelu_tanh": ("gelu_tanh", gelu_tanh),
        "relax.nn.silu": ("silu", lambda x: topi.multiply(x, sigmoid(x))),
    }


def fast_math(mod: Any) -> Any:
    """``mod`` (Relax, before legalization) with its float32 transcendentals computed by
    TVM's fast approximations."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    rules = _rules()

    @mutator
    class FastMath(PyExprMutator):
        def visit_call_(self, op):
            call = super().visit_call_(op)
            rule = rules.get(getattr(op.op, "name", ""))
            if rule is None or str(getattr(op.ty, "dtype", "")) != "float32":
                return call
            name, compute = rule
            args = [call.args[0]]
            if name == "softmax":
                args.append(int(call.attrs.axis))
            return self.builder_.call_te(compute, *args, primfunc_name_hint=name)

    mutator_ = FastMath(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator_.builder_.update_func(gv, mutator_.visit_expr(func))
    return mutator_.builder_.get()
