"""Ship what was compiled: `transtune compile` writes a library the TVM runtime alone loads."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import torch

from transtune.cli import main
from transtune.frontend import export_onnx, from_module

LOADER = """
import json, sys
import numpy as np
import tvm
from tvm import relax
meta = json.load(open(sys.argv[1] + ".json"))
vm = relax.VirtualMachine(tvm.runtime.load_module(sys.argv[1]), tvm.cpu())
x = np.load(sys.argv[2])
out = vm["main"](tvm.runtime.tensor(x))
np.save(sys.argv[3], out.numpy())
assert "transtune" not in sys.modules
print(meta["inputs"][0]["name"], meta["outputs"][0]["shape"])
"""


def test_compile_export_and_load_with_the_tvm_runtime_alone(tmp_path, capsys):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU()).eval()
    x = torch.randn(4, 32)
    onnx_path = export_onnx(from_module(module, (x,)), tmp_path / "mlp.onnx", dynamo=False)
    lib = str(tmp_path / "lib.db")
    assert (
        main(["tune", str(onnx_path), "--library", lib, "--trials", "8", "--batch-size", "8"]) == 0
    )
    so = tmp_path / "mlp.so"
    assert main(["compile", str(onnx_path), "--library", lib, "-o", str(so)]) == 0
    assert "no record" not in capsys.readouterr().out  # every kernel got its schedule
    meta = json.loads((tmp_path / "mlp.so.json").read_text())
    assert meta["inputs"] == [{"name": "input0", "shape": [4, 32], "dtype": "float32"}]
    assert meta["outputs"][0]["shape"] == [4, 16] and meta["untuned_kernels"] == []
    np.save(tmp_path / "x.npy", x.numpy())
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOADER), str(so), str(tmp_path / "x.npy"),
         str(tmp_path / "y.npy")], capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert run.stdout.split()[0] == "input0"
    with torch.no_grad():
        expected = module(x).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-4, atol=1e-5)


def test_missing_records_are_reported_and_bad_paths_refused(tmp_path, capsys):
    from transtune.library import open_library

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8)).eval()
    onnx_path = export_onnx(from_module(module, (torch.randn(1, 8),)), tmp_path / "m.onnx",
                            dynamo=False)  # fmt: skip
    empty = tmp_path / "empty.db"
    open_library(empty).close()
    out = tmp_path / "m.so"
    assert main(["compile", str(onnx_path), "--library", str(empty), "-o", str(out)]) == 0
    assert "have no record and are built untuned" in capsys.readouterr().out
    assert json.loads((tmp_path / "m.so.json").read_text())["untuned_kernels"]
    bad = ["compile", str(onnx_path), "--library", str(empty), "-o", str(tmp_path / "no" / "m.so")]
    assert main(bad) == 2
    assert "no writable directory" in capsys.readouterr().err
