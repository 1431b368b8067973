"""Builders and runners for measuring candidate schedules.

Stock ``LocalBuilder`` starts a fresh worker pool for every batch, and each worker imports
``tvm.s_tir.tensor_intrin`` (about 20-25 s of TVMScript parsing on this host) before building
anything. :class:`WarmBuilder` keeps its workers alive across batches (recycled after
``max_uses`` builds to bound memory), never imports the tensor intrinsics (fp32 LLVM code
needs none), and links each candidate into a shared library inside the parallel build worker,
so that the (serial) runner only has to ``dlopen`` it instead of untarring and linking.

Worker processes ignore SIGINT: Ctrl-C in a terminal signals the whole process group, and a
worker killed by it would turn the candidates in flight into build or run errors, stored and
counted as measured. The parent decides how to stop (after the batch in hand).

A runner worker's own timer (TVM's popen worker answers "timeout" after ``timeout_sec``) has
failed to fire once in hours of collection, leaving the worker blocked on a lock and the
parent waiting forever: :func:`local_runner`'s runner (:class:`WatchedRunner`) times each
candidate under a watchdog that kills a worker which stays silent well past its timeout.

``LocalRunner`` measures asynchronously: MetaSchedule generates and builds the next task's
batch while one is being timed, on the same cores, which disturbs the timings on a small host
(``benchmarks/overlap.py`` measures by how much). :class:`SyncRunner` makes any runner
wait until its batch is measured; tuning uses it for local measurement.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import platform
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

from .errors import error_line

# The evaluator setting used for every measurement unless stated otherwise (MetaSchedule's
# defaults): 1 warm-up, then the mean of 3 runs, stretched to at least 100 ms.
EVALUATOR = ms.runner.EvaluatorConfig(
    number=3, repeat=1, min_repeat_ms=100, enable_cpu_cache_flush=False
)
# Cold weights (the ceiling issue's evaluator lever): 20 runs, each alone, each after every
# argument but the first (the input, which the previous layer has just written) is flushed
# from the CPU caches, as weights stream from memory inside a model.
FLUSH_EVALUATOR = ms.runner.EvaluatorConfig(
    number=1, repeat=20, min_repeat_ms=0, enable_cpu_cache_flush=True
)
# Fixed evaluator for every dataset measurement: 1 warm-up, 3 repeats (all kept), each the
# mean of enough runs to last >= 20 ms, no cache flush.
DATASET_EVALUATOR = ms.runner.EvaluatorConfig(
    number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=False
)


def load_cpu_tensor_intrinsics() -> None:
    """Register only the CPU tensor intrinsics, instead of all of ``tvm.s_tir.tensor_intrin``.

    ``TuneContext`` imports the whole package, whose CUDA part parses hundreds of TVMScript
    functions; each parse calls ``inspect.stack()``, which scans ``sys.modules``, so with
    PyTorch loaded the import takes 25-90 s on this host. CPU schedule rules only need the
    intrinsics of this host's architecture (about 1.5 s). Call before the first TuneContext.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    import tvm.s_tir

    spec = importlib.util.find_spec(name)
    package = importlib.util.module_from_spec(spec)  # not executed: it imports every backend
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    arch = "arm_cpu" if platform.machine() in ("aarch64", "arm64") else "x86"
    importlib.import_module(f"{name}.{arch}")


def _warm_up() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import tvm.driver  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401


def build_and_link(mod, target) -> str:
    """Build one candidate and link it into a shared library; returns its path."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    lib = tvm_build(mod, target=target)
    path = os.path.join(tempfile.mkdtemp(prefix="transtune-build-"), "candidate.so")
    lib.export_library(path)
    return path


@derived_object
class WarmBuilder(ms.builder.PyBuilder):
    """A MetaSchedule builder whose worker processes stay warm between batches."""

    def __init__(self, max_workers: int | None = None, timeout_sec: float = 60.0, max_uses=256):
        super().__init__()
        self.max_workers = max_workers or os.cpu_count() or 1
        self.timeout_sec = timeout_sec
        self.max_uses = max_uses
        self._pool: PopenPoolExecutor | None = None

    def _executor(self) -> PopenPoolExecutor:
        if self._pool is None:
            self._pool = PopenPoolExecutor(
                max_workers=self.max_workers,
                timeout=self.timeout_sec,
                initializer=_warm_up,
                maximum_process_uses=self.max_uses,
            )
        return self._pool

    def build(self, build_inputs: list) -> list:
        results = []
        args = [(b.mod, b.target) for b in build_inputs]
        for outcome in self._executor().map_with_error_catching(lambda a: build_and_link(*a), args):
            if outcome.status == StatusKind.COMPLETE:
                results.append(ms.builder.BuilderResult(outcome.value, None))
            elif outcome.status == StatusKind.TIMEOUT:
                results.append(
                    ms.builder.BuilderResult(
                        None, f"WarmBuilder: timeout after {self.timeout_sec} s"
                    )
                )
            else:
                results.append(ms.builder.BuilderResult(None, f"WarmBuilder: {outcome.value}"))
        return results

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@contextmanager
def warm_builder(builder=None, max_workers: int | None = None) -> Iterator:
    """``builder`` as given, or a new :class:`WarmBuilder` whose workers stop on exit."""
    if builder is not None:
        yield builder
        return
    owned = WarmBuilder(max_workers=max_workers)
    try:
        yield owned
    finally:
        owned.shutdown()


def local_runner(
    evaluator: ms.runner.EvaluatorConfig = EVALUATOR,
    timeout_sec: float = 30.0,
    num_threads: int | None = None,
):
    """MetaSchedule's ``LocalRunner`` (one persistent worker) with the stated evaluator,
    running kernels on ``num_threads`` threads (default: TVM's, one per core), under a
    :class:`WatchedRunner`."""
    initializer = functools.partial(_runner_worker, num_threads)
    return WatchedRunner(ms.runner.LocalRunner(
        timeout_sec=timeout_sec, evaluator_config=evaluator, initializer=initializer
    ))  # fmt: skip


def _runner_worker(num_threads: int | None) -> None:
    """Set up a runner worker: deaf to SIGINT, on ``num_threads`` threads (default: all)."""
    from .compile import set_num_threads

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_num_threads(num_threads)


@derived_object
class WatchedRunner(ms.runner.PyRunner):
    """A ``LocalRunner`` that times one candidate at a time under a watchdog: a candidate with
    no answer after ``limit`` seconds (default: a minute past the runner's own timeout) has
    its worker process killed (the next candidate starts a fresh one) and is reported as a
    timeout."""

    def __init__(self, runner, limit: float | None = None) -> None:
        super().__init__()
        self.runner = runner
        self.limit = limit if limit is not None else runner.timeout_sec + 60.0

    def run(self, runner_inputs: list) -> list:
        out = []
        for runner_input in runner_inputs:
            killed = threading.Event()
            watchdog = threading.Timer(self.limit, self._kill_worker, [killed])
            watchdog.daemon = True
            watchdog.start()
            try:
                (future,) = self.runner.run([runner_input])
                result = future.result()
            finally:
                watchdog.cancel()
            if killed.is_set():
                why = f"Timeout: no answer after {self.limit:.0f} s, worker killed by the watchdog"
                result = ms.runner.RunnerResult(None, why)
            out.append(_Done(result))
        return out

    def _kill_worker(self, killed: threading.Event) -> None:
        """Kill the worker process (and its children): the waiting ``recv`` then reads end of
        file, and the pool starts a new worker for the next candidate. TVM keeps the worker
        in private fields (``PopenPoolExecutor._worker_map``, ``PopenWorker._proc``)."""
        import psutil

        killed.set()
        for worker in list(self.runner.pool._worker_map.values()):
            proc = worker._proc
            if proc is None:
                continue
            try:
                process = psutil.Process(proc.pid)
                for child in [*process.children(recursive=True), process]:
                    child.kill()
            except psutil.NoSuchProcess:
                continue


@derived_object
class SyncRunner(ms.runner.PyRunner):
    """``runner`` made synchronous: ``run`` returns once every candidate is measured, so
    nothing is generated or built on the host while a batch is being timed. Each callable in
    ``listeners`` gets every batch's results as soon as they are in."""

    def __init__(self, runner, listeners: list[Callable] | None = None) -> None:
        super().__init__()
        self.runner = runner
        self.listeners = listeners if listeners is not None else []

    def run(self, runner_inputs: list) -> list:
        results = [f.result() for f in self.runner.run(runner_inputs)]
        for listener in self.listeners:
            listener(results)
        return [_Done(r) for r in results]


@derived_object
class _Done(ms.runner.PyRunnerFuture):
    def __init__(self, result) -> None:
        super().__init__()
        self._result = result

    def done(self) -> bool:
        return True

    def result(self):
        return self._result


@dataclass
class Measurement:
    """Seconds per run of one module (the mean of ``run_secs``), or why it could not be
    measured (``status``: ``build_error``, ``run_error``, ``timeout`` or ``rejected``)."""

    seconds: float | None
    error: str | None = None
    run_secs: list[float] | None = None
    status: str = "ok"


def measure_modules(
    mods: list, target, builder, runner, check=None, check_all: bool = True
) -> list[Measurement]:
    """Build ``mods`` (one batch, in parallel), then time each on its own, one at a time.

    ``check(mod, artifact_path)`` may veto a built module (returning why): every module before
    it is timed, or, with ``check_all=False``, after timing, the fastest first until one
    passes (enough to pick a winner; slower modules keep their times unchecked).
    """
    return [row[0] for row in measure_on(mods, target, builder, [runner], check, check_all)]


def measure_on(
    mods: list, target, builder, runners: list, check=None, check_all: bool = True
) -> list[list[Measurement]]:
    """Like :func:`measure_modules`, but every built module is timed by each runner in turn
    (e.g. one per thread count): one list of measurements per module, one per runner. Each
    runner gets the whole batch at once, so an RPC runner spreads it over its devices;
    ``check_all=False`` checks in the order of the first runner's times."""
    built = build_modules(mods, target, builder)
    out: list[list[Measurement]] = [[] for _ in mods]
    try:
        ready = []  # (index, runner input)
        for i, (mod, b) in enumerate(zip(mods, built, strict=True)):
            if b.error_msg is not None:
                why = f"build failed: {error_line(b.error_msg)}"
                out[i] = [Measurement(None, why, None, "build_error")] * len(runners)
            elif check_all and (vetoed := check(mod, b.artifact_path) if check else None):
                out[i] = [Measurement(None, vetoed, None, "rejected")] * len(runners)
            else:  # the arguments as built: a repacked weight in its packed layout
                args = ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)
                ready.append((i, ms.runner.RunnerInput(b.artifact_path, "cpu", args)))
        for runner in runners:
            futures = runner.run([inp for _, inp in ready]) if ready else []
            for (i, _), future in zip(ready, futures, strict=True):
                out[i].append(_measurement(future.result()))
        if check is not None and not check_all:
            timed = sorted((out[i][0].seconds, i) for i, _ in ready if out[i][0].seconds)
            for _, i in timed:
                if (vetoed := check(mods[i], built[i].artifact_path)) is None:
                    break
                out[i] = [Measurement(None, vetoed, None, "rejected")] * len(runners)
    finally:
        remove_built(built)
    return out


def build_modules(mods: list, target, builder) -> list:
    """Build ``mods`` for ``target`` in parallel: MetaSchedule builder results (an artifact
    path, or an error message, each)."""
    return builder.build([ms.builder.BuilderInput(mod, target) for mod in mods])


def remove_built(built: list) -> None:
    """Delete the artifacts of :func:`build_modules`' results."""
    for b in built:
        if b.artifact_path is not None:
            shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)


def time_built(mods: list, built: list, runner) -> list[float | None]:
    """Seconds per run of already built ``mods`` (None where a build or run failed)."""
    inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu",
                                    ms.arg_info.ArgInfo.from_entry_func(m, remove_preproc=True))
              for m, b in zip(mods, built, strict=True) if b.error_msg is None]  # fmt: skip
    results = iter(f.result() for f in runner.run(inputs))
    out = []
    for b in built:
        r = next(results) if b.error_msg is None else None
        ok = r is not None and r.error_msg is None
        out.append(sum(map(float, r.run_secs)) / len(r.run_secs) if ok else None)
    return out


def _measurement(result) -> Measurement:
    if result.error_msg is not None:
        status = "timeout" if "timeout" in result.error_msg.lower() else "run_error"
        return Measurement(None, f"run failed: {error_line(result.error_msg)}", None, status)
    secs = [float(s) for s in result.run_secs]
    return Measurement(sum(secs) / len(secs), None, secs)


def measure_peak(config, simd_bits: int, session=None) -> tuple[float, float]:
    """(GB/s of the triad, GFLOP/s of the FMA chains) of a target configuration, the best of
    5 and 20 timed rounds, here or on the RPC ``session``'s device (for its hardware descriptor).

    The chains are vectors of 4 or 8 registers' width (at most 64 lanes), unrolled 6 times,
    so 24-48 registers' worth of independent FMAs are in flight: more than latency x pipes on
    current x86 cores. The better of the two shapes is the peak (on a Zen 4, 2 threads: about
    230 GFLOP/s, where numpy's sgemm reaches 205; with 16 lanes x 8 it measured 97)."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    from .compile import set_num_threads

    target = config.tvm_target()
    set_num_threads(config.num_threads, session)
    dev = tvm.cpu() if session is None else session.cpu()

    def build(out, args, lanes: int, unroll: int = 1):
        sch = Schedule(te.create_prim_func([*args, out]))
        block = sch.get_sblock(out.op.name)
        (loop,) = sch.get_loops(block)
        outer, mid, inner = sch.split(loop, [None, unroll, lanes])
        sch.parallel(outer)
        sch.unroll(mid)
        sch.vectorize(inner)
        lib = tvm.compile(sch.mod, target=target)
        if session is None:
            return lib.jit()
        # One name per shape: the server loads a shared library once per path, so a second
        # upload under the first one's name would run the first module.
        name = f"{out.op.name}-{args[0].shape[0]}x{lanes}.tar"
        with tempfile.TemporaryDirectory() as tmp:
            lib.export_library(f"{tmp}/{name}")
            session.upload(f"{tmp}/{name}")
            return session.load_module(name)

    def tensors(count: int, n: int):
        return [tvm.runtime.tensor(np.full(n, 1.0, "float32"), device=dev) for _ in range(count)]

    n = 16 << 20  # 64 MiB per float32 array
    b, c = te.placeholder((n,), name="b"), te.placeholder((n,), name="c")
    triad = build(te.compute((n,), lambda i: b[i] + 3.0 * c[i], name="a"), [b, c], 16)
    bandwidth = 12.0 * n / _best_seconds(triad, dev, tensors(3, n)) / 1e9

    # 512 chain groups per thread: about a millisecond a call, so that the thread pool's
    # wake-up is under 1% of it; the best of 20 rounds, so that a noisy host's quiet moment
    # sets the peak (kernels timed over minutes find those moments too).
    depth, unroll, peak = 256, 6, 0.0
    for registers in (4, 8):
        lanes = min(64, registers * max(simd_bits // 32, 1))
        m = lanes * unroll * 512 * config.num_threads
        x = te.placeholder((m,), name="x")
        fma = build(te.compute((m,), functools.partial(_chain, x, depth), name="y"), [x],
                    lanes, unroll)  # fmt: skip
        seconds = _best_seconds(fma, dev, tensors(2, m), number=10, repeat=20)
        peak = max(peak, 2.0 * depth * m / seconds / 1e9)
    return bandwidth, peak


def _chain(x, depth: int, i):
    """``depth`` dependent multiply-adds on ``x[i]`` (LLVM contracts them into FMAs)."""
    v = x[i]
    for _ in range(depth):
        v = v * 0.999 + 0.001
    return v


def _best_seconds(lib, dev, args, number: int = 3, repeat: int = 5) -> float:
    """Best mean seconds per call of ``lib``'s function over ``repeat`` rounds of ``number``."""
    timer = lib.time_evaluator("main", dev, number=number, repeat=repeat)
    return min(timer(*args).results)


class NumericsCheck:
    """A ``check`` for :func:`measure_modules`: compares a built candidate with the untuned
    kernel ``mod`` on the same random inputs (within ``rtol`` x max|reference|). A candidate
    that repacks a weight (prepacked lowering) was built for the packed layout; it is built
    again with its repacking block, to read the same inputs."""

    def __init__(self, mod, target, rtol: float, seed: int = 0) -> None:
        import tvm

        self.rtol, self.target = rtol, target
        self.device = tvm.cpu()
        rng = np.random.default_rng(seed)
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        self.inputs = []
        for arg in args:
            shape, dtype = [int(d) for d in arg.shape], str(arg.dtype)
            if np.issubdtype(np.dtype(dtype), np.floating):
                self.inputs.append(rng.standard_normal(shape).astype(dtype))
            else:  # indices: zeros are valid for any gather
                self.inputs.append(np.zeros(shape, dtype=dtype))
        reference = tvm.compile(mod, target=target)
        self.expected = self._run(reference)

    def _run(self, lib) -> list[np.ndarray]:
        import tvm

        tensors = [tvm.runtime.tensor(x, self.device) for x in self.inputs]
        lib["main"](*tensors)
        return [t.numpy() for t in tensors]

    def __call__(self, mod, artifact_path: str) -> str | None:
        import tvm

        packed = [[int(d) for d in a.shape] for a in ms.arg_info.ArgInfo.from_entry_func(mod, True)]
        if packed != [list(x.shape) for x in self.inputs]:
            got = self._run(tvm.compile(mod, target=self.target))
        else:
            got = self._run(tvm.runtime.load_module(artifact_path))
        for out, ref in zip(got, self.expected, strict=True):
            scale = max(float(np.abs(ref).max()), 1e-12) if ref.size else 1.0
            err = float(np.abs(out.astype(np.float64) - ref).max()) / scale if ref.size else 0.0
            if not err <= self.rtol:
                return f"numerics differ from the untuned kernel (rel. err {err:.1e})"
        return None
