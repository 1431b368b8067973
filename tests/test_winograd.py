"""Winograd convolutions: which convolutions change, numerics against PyTorch, record sharing."""

import numpy as np
import pytest
import torch

from transtune.compile import compile_model
from transtune.errors import TargetError
from transtune.frontend import from_module
from transtune.targets import get_config
from transtune.tasks import extract_kernels


class Convs(torch.nn.Module):
    """Stride-1 3x3 convolutions (with and without bias, a residual add) on an image whose
    sides are not multiples of the 4x4 output tile (8 x 7 tiles), and a strided one that stays
    direct."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)
        self.c = torch.nn.Conv2d(32, 32, 3, padding=1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return self.c(torch.relu(self.b(y) + y))


@pytest.fixture(scope="module")
def convs():
    torch.manual_seed(0)
    return from_module(Convs().eval(), (torch.randn(1, 16, 30, 27),), name="convs")


def test_stride_1_3x3_convolutions_of_enough_tiles_become_winograd(convs, tiny_conv):
    config = get_config("host", "NHWC", prepack=True, winograd=True)
    classes = sorted(k.kernel_class for k in extract_kernels(convs.mod, config))
    assert classes == ["conv2d+add", "conv2d_winograd+add+relu", "conv2d_winograd+add+relu",
                       "transpose", "transpose"]  # fmt: skip
    small = from_module(*tiny_conv, name="tiny")  # 16 x 16: 16 tiles, too few
    assert not any("winograd" in k.kernel_class for k in extract_kernels(small.mod, config))


def test_winograd_outputs_match_pytorch(convs):
    expected = convs.torch_module(*convs.torch_inputs()).detach().numpy()
    config = get_config("host", "NHWC", prepack=True, winograd=True)
    (out,) = compile_model(convs, config).run(convs.inputs)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_winograd_needs_nhwc_and_shares_the_records_of_the_kernels_it_leaves(convs):
    with pytest.raises(TargetError, match="NHWC"):
        get_config("host", "NCHW", winograd=True)
    direct, winograd = get_config("host", "NHWC"), get_config("host", "NHWC", winograd=True)
    kernels = [extract_kernels(convs.mod, c) for c in (direct, winograd)]
    unchanged = {k.workload_hash for k in kernels[1] if "winograd" not in k.kernel_class}
    assert unchanged and unchanged <= {k.workload_hash for k in kernels[0]}
    assert any("winograd" in k.kernel_class for k in kernels[1])
