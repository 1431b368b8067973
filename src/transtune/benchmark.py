"""End-to-end benchmark of one model: TVM (untuned / tuned) against PyTorch and ONNX Runtime.

All runtimes use the same thread count (the target configuration's). Latency is the median
of ``repeat`` timed repeats after a warm-up, each repeat averaging enough runs to last
``min_repeat_ms``. Numerics: every output is compared with PyTorch eager (ONNX Runtime for a
model given as ONNX); an output matches when ``max|out - ref| <= RTOL * max|ref|``.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .compile import compile_model
from .frontend import ImportedModel, export_onnx
from .targets import TargetConfig, get_config, host_info

RTOL = 1e-3
# Pause before each timed repeat of :func:`compare`: the last runtime's thread pool (OpenMP's,
# ONNX Runtime's, TVM's) spins for a while after its work and would steal the next one's cores.
SETTLE_SECONDS = 0.3


@dataclass
class Timing:
    """Latency of one runtime on one model."""

    runtime: str
    seconds: list[float]
    max_rel_err: float | None = None  # against the reference outputs; None for the reference

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.seconds)

    @property
    def spread_ms(self) -> tuple[float, float]:
        return 1e3 * min(self.seconds), 1e3 * max(self.seconds)

    @property
    def matches(self) -> bool | None:
        return None if self.max_rel_err is None else self.max_rel_err <= RTOL


@dataclass
class BenchResult:
    """Everything measured for one model on one target configuration."""

    model: str
    config: str
    num_threads: int
    reference: str
    timings: list[Timing] = field(default_factory=list)
    missing_records: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0

    def timing(self, runtime: str) -> Timing | None:
        return next((t for t in self.timings if t.runtime == runtime), None)

    def to_json(self) -> dict:
        from importlib import metadata

        host = host_info()
        return {
            **asdict(self),
            "timings": [
                {
                    "runtime": t.runtime,
                    "median_ms": t.median_ms,
                    "min_ms": t.spread_ms[0],
                    "max_ms": t.spread_ms[1],
                    "seconds": t.seconds,
                    "max_rel_err": t.max_rel_err,
                    "matches": t.matches,
                }
                for t in self.timings
            ],
            "rtol": RTOL,
            "host": {"cpu": host.cpu_model, "mcpu": host.mcpu, "cores": host.cores},
            "versions": {
                name: metadata.version(package)
                for name, package in (
                    ("tvm", "apache-tvm"),
                    ("torch", "torch"),
                    ("onnxruntime", "onnxruntime"),
                )
            },  # fmt: skip
        }


def time_callable(fn: Callable[[], object], repeat: int, min_repeat_ms: int) -> list[float]:
    """Seconds per call of ``fn``: one warm-up, then ``repeat`` averaged repeats."""
    fn()
    results = []
    for _ in range(repeat):
        runs, start = 0, time.perf_counter()
        while True:
            fn()
            runs += 1
            elapsed = time.perf_counter() - start
            if elapsed * 1e3 >= min_repeat_ms:
                break
        results.append(elapsed / runs)
    return results


def max_rel_err(outputs: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """Largest ``max|out - ref| / max|ref|`` over the outputs (inf on a shape mismatch)."""
    if len(outputs) != len(reference):
        return float("inf")
    worst = 0.0
    for out, ref in zip(outputs, reference, strict=True):
        if out.shape != ref.shape:
            return float("inf")
        scale = max(float(np.abs(ref).max()), 1e-12)
        worst = max(worst, float(np.abs(out.astype(np.float64) - ref).max()) / scale)
    return worst


def _torch_runner(model: ImportedModel, num_threads: int):
    import torch

    torch.set_num_threads(num_threads)
    inputs = model.torch_inputs()

    def run():
        with torch.no_grad():
            out = model.torch_module(*inputs)
        return [o.numpy() for o in (out if isinstance(out, tuple | list) else (out,))]

    return run


def _onnxruntime_session(model: ImportedModel, num_threads: int, workdir: Path, **options):
    """An ONNX Runtime CPU session of ``model`` (its ONNX, or its PyTorch source exported to
    ``workdir``) on ``num_threads`` threads, ``options`` set on its ``SessionOptions``; and
    the feeds of the model's inputs."""
    import onnx
    import onnxruntime as ort

    if model.onnx_model is not None:
        path = workdir / f"{model.name}.onnx"
        onnx.save(model.onnx_model, str(path))
    else:
        path = export_onnx(model, workdir / f"{model.name}.onnx")
    settings = ort.SessionOptions()
    settings.intra_op_num_threads = num_threads
    settings.inter_op_num_threads = 1
    for name, value in options.items():
        setattr(settings, name, value)
    session = ort.InferenceSession(str(path), settings, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), model.inputs, strict=True)}
    return session, feeds


def _onnxruntime_runner(model: ImportedModel, num_threads: int, workdir: Path):
    session, feeds = _onnxruntime_session(model, num_threads, workdir)
    return lambda: session.run(None, feeds)


def onnxruntime_profile(model: ImportedModel, num_threads: int, repeat: int = 10) -> dict:
    """Where ONNX Runtime's inference time goes (its profiler, after a warm-up): per graph
    node, its operator and mean seconds per inference (``"nodes"``, slowest first), seconds
    per operator type (``"by_op"``), and the mean profiled inference (``"total"``)."""
    import json

    with tempfile.TemporaryDirectory(prefix="transtune-") as tmp:
        session, feeds = _onnxruntime_session(
            model, num_threads, Path(tmp), enable_profiling=True,
            profile_file_prefix=str(Path(tmp) / "ort"),
        )  # fmt: skip
        session.run(None, feeds)  # warm-up, profiled too: left out below
        for _ in range(repeat):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    warm = runs[0]["ts"] + runs[0]["dur"] if runs else 0
    nodes: dict[str, dict] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= warm:
            name = e["name"][: -len("_kernel_time")]
            node = nodes.setdefault(name, {"op": e["args"].get("op_name", "?"), "seconds": 0.0})
            node["seconds"] += e["dur"] * 1e-6 / repeat
    by_op: dict[str, float] = {}
    for node in nodes.values():
        by_op[node["op"]] = by_op.get(node["op"], 0.0) + node["seconds"]
    ranked = sorted(({"name": n, **v} for n, v in nodes.items()), key=lambda v: -v["seconds"])
    return {
        "nodes": ranked,
        "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        "total": sum(e["dur"] for e in runs[1:]) * 1e-6 / max(1, len(runs) - 1),
    }


@contextlib.contextmanager
def _peer_runners(
    model: ImportedModel, num_threads: int, peers
) -> Iterator[tuple[dict[str, Callable], str]]:
    """Runners of ``model`` on the ``peers`` of TVM that are named and available (PyTorch
    needs the model's module; ONNX Runtime gets it exported to a temporary folder), and which
    of them is the numerics reference (PyTorch where there is one)."""
    runners: dict[str, Callable] = {}
    with tempfile.TemporaryDirectory(prefix="transtune-") as tmp:
        if "pytorch" in peers and model.torch_module is not None:
            runners["pytorch"] = _torch_runner(model, num_threads)
        if "onnxruntime" in peers:
            runners["onnxruntime"] = _onnxruntime_runner(model, num_threads, Path(tmp))
        yield runners, "pytorch" if "pytorch" in runners else "onnxruntime"


def benchmark(
    model: ImportedModel,
    config: TargetConfig | str | None = None,
    database=None,
    repeat: int = 5,
    min_repeat_ms: int = 200,
    runtimes: tuple[str, ...] = ("tvm", "pytorch", "onnxruntime"),
    label: str | None = None,
) -> BenchResult:
    """Measure ``model`` with TVM (tuned from ``database`` when given) and its peers.

    ``label`` names the TVM timing (default ``tvm-tuned`` with a database, else
    ``tvm-untuned``)."""
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    n = config.num_threads
    with _peer_runners(model, n, runtimes) as (runners, reference):
        result = BenchResult(model.name, config.name, n, reference)
        compiled = None
        if "tvm" in runtimes:
            start = time.perf_counter()
            compiled = compile_model(model, config, database)
            result.compile_seconds = time.perf_counter() - start
            result.missing_records = compiled.missing_records
        expected = runners[reference]() if reference in runners else None
        if compiled is not None:
            label = label or ("tvm-tuned" if database is not None else "tvm-untuned")
            seconds = compiled.time(model.inputs, repeat, min_repeat_ms)
            err = max_rel_err(compiled.run(model.inputs), expected) if expected else None
            result.timings.append(Timing(label, seconds, err))
        for name, run in runners.items():
            seconds = time_callable(run, repeat, min_repeat_ms)
            err = None if name == reference else max_rel_err(run(), expected)
            result.timings.append(Timing(name, seconds, err))
    return result


def compare(
    model: ImportedModel,
    builds: dict[str, tuple[TargetConfig, object]],
    repeat: int = 10,
    min_repeat_ms: int = 200,
    peers: tuple[str, ...] = ("pytorch", "onnxruntime"),
) -> BenchResult:
    """``model`` built several ways (``builds``: label -> (configuration, database or None),
    one thread count) and its ``peers``, timed *interleaved*: each of ``repeat`` rounds times
    every runtime once, in turn (after a pause of ``SETTLE_SECONDS``), so that a drift of the
    host (clock, neighbours, caches) falls on all of them alike instead of on whichever ran
    last. Every TVM build's numerics are checked against the reference's."""
    configs = [config for config, _ in builds.values()]
    n = configs[0].num_threads
    if any(c.num_threads != n for c in configs):
        raise ValueError("compare: every build must run on the same thread count")
    with _peer_runners(model, n, peers) as (runners, reference):
        result = BenchResult(model.name, configs[0].name, n, reference)
        expected = runners[reference]() if reference in runners else None
        errors: dict[str, float | None] = {}
        compiled = {}
        for label, (config, database) in builds.items():
            compiled[label] = compile_model(model, config, database)
            result.missing_records += [f"{label}:{k}" for k in compiled[label].missing_records]
            out = compiled[label].run(model.inputs)
            errors[label] = max_rel_err(out, expected) if expected else None
        for name, run in runners.items():
            errors[name] = None if name == reference else max_rel_err(run(), expected)
            run()  # warm-up
        seconds: dict[str, list[float]] = {label: [] for label in [*compiled, *runners]}
        for _ in range(repeat):
            for label, c in compiled.items():
                time.sleep(SETTLE_SECONDS)
                seconds[label] += c.time(model.inputs, 1, min_repeat_ms)
            for name, run in runners.items():
                time.sleep(SETTLE_SECONDS)
                seconds[name] += time_callable(run, 1, min_repeat_ms)
        result.timings = [Timing(label, secs, errors[label]) for label, secs in seconds.items()]
    return result
