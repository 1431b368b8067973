"""Fast math: transcendentals by TVM's approximations, same classes, same numerics (1e-5)."""

import numpy as np
import pytest
import torch

from transtune.compile import compile_model
from transtune.frontend import from_module
from transtune.library import target_key
from transtune.targets import get_config
from transtune.tasks import extract_kernels

LIBM = ("T.erf(", "T.exp(", "T.tanh(", "T.sigmoid(")


class Transcendentals(torch.nn.Module):
    """Every operator fast math rewrites: softmax (exp), GELU (erf and tanh forms), SiLU,
    sigmoid, tanh and exp."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.softmax(x, dim=-1) + torch.nn.functional.gelu(x)
        y = y + torch.nn.functional.gelu(x, approximate="tanh") + torch.nn.functional.silu(x)
        return y + torch.sigmoid(x) * torch.tanh(x) - torch.exp(-x * x)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return from_module(Transcendentals(), (4 * torch.randn(4, 64),), name="transcendentals")


def test_fast_math_leaves_no_libm_call_and_keeps_kernel_classes(model):
    exact = extract_kernels(model.mod, get_config("host"))
    fast = extract_kernels(model.mod, get_config("host", fast_math=True))
    assert any(call in k.mod.script() for k in exact for call in LIBM)  # the test sees them
    assert not [k.name for k in fast if any(call in k.mod.script() for call in LIBM)]
    assert sorted(k.kernel_class for k in fast) == sorted(k.kernel_class for k in exact)
    # The rewritten kernels are other workloads: a library keeps their records apart.
    assert {k.workload_hash for k in fast}.isdisjoint({k.workload_hash for k in exact})


def test_fast_math_outputs_match_pytorch(model):
    expected = model.torch_module(torch.from_numpy(model.inputs[0])).detach().numpy()
    (out,) = compile_model(model, get_config("host", fast_math=True)).run(model.inputs)
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5)


def test_fast_math_shares_the_record_key_of_unchanged_kernels(tiny_conv):
    exact, fast = get_config("host"), get_config("host", fast_math=True)
    assert fast.fast_math and not exact.fast_math
    assert target_key(fast) == target_key(exact)
    conv = from_module(*tiny_conv, name="tiny")
    hashes = [[k.workload_hash for k in extract_kernels(conv.mod, c)] for c in (exact, fast)]
    assert hashes[0] == hashes[1]  # no transcendental: the same programs, the same records
