"""The README's Python workflow, run exactly as written, on a tiny model."""

from pathlib import Path

import torch

import transtune

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_workflow_snippet_runs(tmp_path, monkeypatch):
    text = README.read_text()
    block = text.split("<!-- workflow snippet")[1].split("```python\n", 1)[1].split("```")[0]
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).eval()
    tiny = transtune.from_module(module, (torch.randn(64, 256),), name="tiny_mlp")
    code = block.replace('"resnext50_32x4d"', "TINY").replace("time_budget=120", "time_budget=8")
    assert code != block and all(
        f"wf.{step}(" in code for step in ("transfer", "tune", "compile", "benchmark")
    )
    root = README.parent
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "data").symlink_to(root / "data")  # the shipped cost model, as in the repo
    printed = []
    exec(code, {"TINY": tiny, "print": lambda *a: printed.append(a)})  # noqa: S102
    (latency, stages), (timings,) = printed
    assert latency > 0 and stages <= {"transfer", "sampled", "untuned"} and "sampled" in stages
    assert {t.runtime for t in timings} >= {"tvm-tuned", "pytorch"}
    assert (tmp_path / "runs" / "model.so").is_file()
    assert (tmp_path / "runs" / "model.so.json").is_file()
