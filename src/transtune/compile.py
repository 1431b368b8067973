"""Compile a whole model with TVM Relax, optionally applying tuned schedules from a database."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import TranstuneError
from .frontend import ImportedModel
from .machine import configure_threads, usable_cpus
from .targets import TargetConfig, get_config
from .tasks import preprocess

log = logging.getLogger(__name__)


def set_num_threads(num_threads: int | None = None, session=None) -> None:
    """Use ``num_threads`` threads (default: every CPU we may run on) in TVM's runtime thread
    pool: this process's, or that of an RPC ``session``'s server."""
    if session is not None:
        session.get_function("runtime.config_threadpool")(1, int(num_threads or 0))
        return
    import tvm

    configure_threads()
    tvm.get_global_func("runtime.config_threadpool")(1, int(num_threads or usable_cpus()))


@dataclass
class CompiledModel:
    """A built model on the CPU (Relax VM), ready to run and time."""

    name: str
    config: TargetConfig
    executable: Any = field(repr=False)
    missing_records: list[str] = field(default_factory=list)  # kernels left untuned
    applied_records: list[str] = field(default_factory=list)  # kernels with a tuned schedule
    inputs: list[dict] = field(default_factory=list)  # {"name", "shape", "dtype"} per input

    def __post_init__(self) -> None:
        import tvm
        from tvm import relax

        self._device = tvm.cpu()
        self._vm = relax.VirtualMachine(self.executable, self._device)

    def _tensors(self, inputs: list[np.ndarray]) -> list:
        import tvm

        return [tvm.runtime.tensor(np.ascontiguousarray(x), self._device) for x in inputs]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run once; returns the outputs as numpy arrays (a tuple output is flattened)."""
        set_num_threads(self.config.num_threads)
        return _flatten(self._vm["main"](*self._tensors(inputs)))

    def time(self, inputs: list[np.ndarray], repeat: int = 5, min_repeat_ms: int = 200) -> list:
        """Seconds per inference, one value per repeat (after a warm-up run)."""
        set_num_threads(self.config.num_threads)
        timer = self._vm.time_evaluator(
            "main", self._device, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms
        )
        return list(timer(*self._tensors(inputs)).results)

    def profile(self, inputs: list[np.ndarray], repeat: int = 10) -> dict[str, dict]:
        """Where one inference's time goes, inside the model (each kernel's inputs as the one
        before left them in cache): by called function (kernels, and the VM builtins that
        allocate and check), its calls per inference and the median over ``repeat`` runs
        (after a warm-up) of its seconds per inference; ``"total"``: the median instrumented
        inference. Timed around each call instruction, so the VM's own work between calls,
        and a few microseconds per call of instrumentation, count in the total only."""
        from tvm import relax

        set_num_threads(self.config.num_threads)
        vm = relax.VirtualMachine(self.executable, self._device)
        run: dict[str, list] = {}
        started = [0.0]

        def instrument(func, name, before_run, ret_value, *args) -> int:
            now = time.perf_counter()
            if before_run:
                started[0] = now
            else:
                entry = run.setdefault(str(name), [0, 0.0])
                entry[0] += 1
                entry[1] += now - started[0]
            return 0  # VMInstrumentReturnKind.kNoOp: go on

        vm.set_instrument(instrument)
        tensors = self._tensors(inputs)
        vm["main"](*tensors)  # warm-up
        runs, totals = [], []
        for _ in range(repeat):
            run.clear()
            start = time.perf_counter()
            vm["main"](*tensors)
            totals.append(time.perf_counter() - start)
            runs.append({name: tuple(v) for name, v in run.items()})
        out = {name: {"calls": runs[0][name][0],
                      "seconds": float(np.median([r.get(name, (0, 0.0))[1] for r in runs]))}
               for name in runs[0]}  # fmt: skip
        out["total"] = {"calls": 1, "seconds": float(np.median(totals))}
        return out

    def export(self, path: str | os.PathLike) -> Path:
        """Write the compiled model as a shared library that the TVM runtime alone loads, and
        beside it ``PATH.json``: its inputs and outputs (names, shapes, dtypes), the hardware
        id and target it was built for, and the kernels left untuned. Load and run it with::

            import json, numpy as np, tvm
            from tvm import relax
            meta = json.load(open("model.so.json"))
            vm = relax.VirtualMachine(tvm.runtime.load_module("model.so"), tvm.cpu())
            args = [tvm.runtime.tensor(np.zeros(i["shape"], i["dtype"])) for i in meta["inputs"]]
            out = vm["main"](*args)  # a Tensor, or a tuple of them as meta["outputs"] lists
        """
        path = Path(path)
        folder = path.absolute().parent
        if not (folder.is_dir() and os.access(folder, os.W_OK)):
            raise TranstuneError(f"cannot write {path}: no writable directory {folder}")
        example = [np.zeros(i["shape"], i["dtype"]) for i in self.inputs]
        outputs = self.run(example)
        self.executable.export_library(str(path))
        meta = {
            "model": self.name, "hardware": self.config.name, "target": self.config.target,
            "threads": self.config.num_threads, "inputs": self.inputs,
            "outputs": [{"name": f"output{i}", "shape": list(o.shape), "dtype": str(o.dtype)}
                        for i, o in enumerate(outputs)],
            "untuned_kernels": self.missing_records,
        }  # fmt: skip
        Path(f"{path}.json").write_text(json.dumps(meta, indent=1))
        return path


def _flatten(value) -> list[np.ndarray]:
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    return [array for item in value for array in _flatten(item)]


def compile_model(
    model: ImportedModel, config: TargetConfig | str | None = None, database=None
) -> CompiledModel:
    """Build ``model`` for a target configuration (default: this host).

    With a MetaSchedule ``database``, every kernel that has a record gets its tuned schedule;
    kernels without one stay untuned and are listed in ``missing_records`` (and logged), never
    silently.
    """
    from tvm import relax

    if not isinstance(config, TargetConfig):
        config = get_config(config)
    target = config.tvm_target()
    fused, _ = preprocess(model.mod, config)
    applied, missing = [], []
    if database is not None:
        applied, missing = _records_available(fused, target, database)
        with target, database:
            fused = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(fused)
    if config.prepack:  # weights repacked for the schedules, once, at compile time
        with target:
            fused = relax.transform.SplitLayoutRewritePreproc()(fused)
            fused = relax.transform.FoldConstant()(fused)
    if missing:
        log.warning(
            "%s: %d of %d kernels have no tuning record and stay untuned: %s",
            model.name, len(missing), len(missing) + len(applied), ", ".join(missing),
        )  # fmt: skip
    executable = relax.build(fused, target=target)
    names = [str(p.name) for p in model.mod["main"].params]
    inputs = [{"name": n, "shape": list(x.shape), "dtype": str(x.dtype)}
              for n, x in zip(names, model.inputs, strict=False)]  # fmt: skip
    return CompiledModel(model.name, config, executable, missing, applied, inputs)


def _records_available(fused, target, database) -> tuple[list[str], list[str]]:
    """Split the kernels of ``fused`` into those with and without a record in ``database``."""
    from tvm import tirx
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    applied, missing = [], []
    for gv, func in fused.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        record = database.query_tuning_record(_normalize_mod(func), target, gv.name_hint)
        (applied if record is not None else missing).append(gv.name_hint)
    return sorted(applied), sorted(missing)
