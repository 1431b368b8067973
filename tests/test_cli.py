"""The command line: tables on good input, one clear line and exit 2 on bad input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from transtune.cli import main
from transtune.targets import get_config, missing_isa

# No x86 CPU has both Diamond Rapids' AMX/AVX10.2 and Zen 5's SSE4a: one of them cannot run here.
UNRUNNABLE = next(
    m for m in ("diamondrapids", "znver5") if missing_isa({"kind": "llvm", "mcpu": m})
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["kernels", "resnet19"], "unknown model"),
        (["kernels", "/nonexistent/model.onnx"], "no such ONNX file"),
        (["kernels", "resnet18", "--target", "tpu-v9"], "unknown target configuration"),
        (
            ["kernels", "resnet18", "--target", json.dumps({"kind": "llvm", "mcpu": UNRUNNABLE})],
            "does not have",
        ),
        (["kernels", "resnet18", "--target", '{"kind": "cuda"}'], "gpu"),
        (["tune", "resnet18", "--trials", "8", "--library", "mysql://db/x"], "scheme"),
        (["dataset", "info", "/nonexistent/data"], "not a transtune dataset"),
        (["dataset", "collect", "--models", "resnet19", "--out", "/tmp/x"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_on_stderr(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message.lower() in err.lower()
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_malformed_onnx_from_a_real_process_has_no_traceback(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"garbage")
    proc = subprocess.run(
        [sys.executable, "-m", "transtune.cli", "kernels", str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "malformed ONNX" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_targets_lists_host_configurations(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    assert "host-1core" in out and "num-cores" in out


def test_kernels_of_an_onnx_file(tiny_conv, tmp_path, capsys):
    from transtune.frontend import export_onnx, from_module

    path = export_onnx(from_module(*tiny_conv), tmp_path / "tiny.onnx", dynamo=False)
    assert main(["kernels", str(path)]) == 0
    out = capsys.readouterr().out
    assert "conv2d+add+relu" in out and "classes" in out


def test_bench_writes_json(tiny_conv, tmp_path, capsys):
    onnx_path = tmp_path / "tiny.onnx"
    from transtune.frontend import export_onnx, from_module

    export_onnx(from_module(*tiny_conv), onnx_path, dynamo=False)
    out_json = tmp_path / "bench.json"
    assert main(["bench", str(onnx_path), "--repeat", "2", "--json", str(out_json)]) == 0
    result = json.loads(out_json.read_text())
    runtimes = {t["runtime"]: t for t in result["timings"]}
    assert set(runtimes) == {"tvm-untuned", "onnxruntime"}
    assert runtimes["tvm-untuned"]["matches"] is True
    assert result["reference"] == "onnxruntime" and result["versions"]["tvm"]


@pytest.mark.slow  # 91 s: tunes and transfers two ONNX models through the CLI
def test_tune_then_transfer_onnx_models(tiny_conv, tmp_path, capsys):
    """ONNX models go through tuning and transfer-tuning like zoo models do."""
    import torch

    from transtune.frontend import export_onnx, from_module

    module, (x,) = tiny_conv
    donor, new = tmp_path / "donor.onnx", tmp_path / "new.onnx"
    export_onnx(from_module(module, (x,), name="donor"), donor, dynamo=False)
    export_onnx(from_module(module, (torch.cat([x, x, x]),), name="new"), new, dynamo=False)
    lib = f"sqlite:///{tmp_path}/lib.db"
    assert main(["tune", str(donor), "--library", lib, "--trials", "16", "--batch-size", "8"]) == 0
    capsys.readouterr()
    argv = ["transfer", str(new), "--library", lib, "--max-candidates", "2", "--repeat", "2",
            "--budget", "8"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"new: transfer-tuning on {get_config('host').name}, shape policy" in out
    assert "search continued for" in out  # the hybrid: MetaSchedule from the transferred ones
    assert "donor#w" in out  # at least one kernel took a donor's schedule
    assert "tvm-transferred" in out and "onnxruntime" in out
    assert re.search(r"compiled without a schedule: \d+ of \d+ kernels", out)


def test_dataset_collect_info_export(tmp_path, capsys):
    out, work = tmp_path / "ds", tmp_path / "ms"
    argv = ["dataset", "collect", "--models", "bert_tiny", "--sizes", "16", "--per-kernel", "1",
            "--targets", "host-1core", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "new records" in capsys.readouterr().out
    assert main(["dataset", "info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "models: ['bert_tiny']" in info and "host-1core" in info
    assert main(["dataset", "export", str(out), "--target", "host-1core", "--out", str(work)]) == 0
    assert (work / "database_tuning_record.json").stat().st_size > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "resnet18", "--batch", "0"],
        ["bench", "resnet18", "--repeat", "0"],
        ["tune", "resnet18", "--trials", "0"],
        ["tune", "resnet18", "--time", "nan"],
        ["transfer", "resnet18", "--max-candidates", "-1"],
        ["library", "merge", "x.db", "--top-k", "0"],
        ["dataset", "collect", "--batch-sizes", "1,x", "--out", "ds"],
        ["dataset", "prune", "ds", "--keep", "1.5", "--out", "small"],
        ["dataset", "export", "data/dataset", "--target", "nope", "--out", "ms"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, capsys, tmp_path, monkeypatch):
    root = Path(__file__).resolve().parent.parent
    argv = [str(root / a) if a == "data/dataset" else a for a in argv]
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("transtune: error:")


def test_costmodel_train_checks_its_output_before_training(tmp_path, capsys):
    root = Path(__file__).resolve().parent.parent
    argv = ["costmodel", "train", str(root / "data" / "dataset"), str(tmp_path / "no" / "m.json")]
    assert main(argv) == 2
    assert "no writable directory" in capsys.readouterr().err


def test_damaged_files_are_one_line_and_exit_2(tmp_path, capsys):
    from transtune.costmodel.models import FORMAT_VERSION, CostModelError, load

    (tmp_path / "ds").mkdir()
    for text in ("{", "[1, 2]", '{"format": 99}'):  # broken, not an object, a future format
        (tmp_path / "ds" / "dataset.json").write_text(text)
        assert main(["dataset", "info", str(tmp_path / "ds")]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    damaged = tmp_path / "m.json"
    damaged.write_text(json.dumps({"kind": "xgb", "format": FORMAT_VERSION, "booster": "junk"}))
    with pytest.raises(CostModelError, match="damaged xgb cost model"):
        load(damaged)
