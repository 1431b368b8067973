"""Collect a TenSet-style dataset: sampled schedules of zoo kernels, measured per target.

Kernels come from zoo models at several batch sizes (and input sizes), deduplicated by
workload hash; each keeps the models and weights it occurs with. Per kernel, ``per_kernel``
schedules are sampled from the design space of the first target configuration
(:mod:`.sampling`, deterministic seeds) and each is measured on every configuration. Configs
that compile alike (same target apart from the core count, e.g. ``host`` and ``host-1core``)
share one build, timed once per thread count. Every measurement is kept, failures with their
status and reason, in the partition of the hardware id it was measured on. With
``programs_from`` (a hardware id the dataset holds), nothing is sampled: the programs measured
there are rebuilt (decisions replayed on the stored design space, the new target's
postprocessors applied) and measured on the new configurations, so that each program has a
latency on both CPUs (``transtune dataset collect --programs-from epyc-znver4-2c``). Rerunning skips
what the directory holds; resuming with another seed, evaluator or sampling target (which
would pair one program's features with another's latencies) is refused, and so is measuring
under a hardware id that the dataset holds for another CPU.

With ``trajectory`` (N), each kernel also gets the N programs that MetaSchedule's evolutionary
search visits on it (its XGBoost cost model learning online from their measurements, on the
first configuration): the distribution a cost model ranks inside a search, beside the random
samples. They are measured like the samples, on every configuration, and kept apart by the
records' ``source`` column (``trajectory``; sample indices from :data:`TRAJECTORY_BASE` on).
The search simplifies its design spaces' traces, so their instruction lists are stored as
further spaces of the kernel. The search times its programs on the first configuration with
the dataset's runner and evaluator, so those timings are its records there (only failures
are measured again, to record why); the other configurations measure them as usual.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..hardware import describe
from ..measure import DATASET_EVALUATOR as EVALUATOR
from ..measure import (
    SyncRunner,
    load_cpu_tensor_intrinsics,
    local_runner,
    measure_on,
    warm_builder,
)
from ..schedules import design_spaces, kernel_seed, sample
from ..targets import TargetConfig, get_config
from ..tasks import Kernel, workload_json
from .programs import (
    TRAJECTORY_BASE,
    programs,
    rebuilt,
    space_texts,
    stored_programs,
    trajectory_of,
)
from .store import DatasetError, DatasetStore


@dataclass
class DatasetKernel:
    kernel: Kernel
    models: list[str] = field(default_factory=list)  # "resnet18@b4"
    weights: list[int] = field(default_factory=list)


@dataclass
class CollectStats:
    kernels_done: int = 0
    kernels_skipped: int = 0  # complete already
    kernels_without_space: int = 0  # no schedulable block (or no program to take): nothing to do
    not_rebuilt: int = 0  # programs taken from another partition that no longer apply
    reused: int = 0  # trajectory programs recorded with the search's own timing
    records: int = 0
    failures: int = 0
    seconds: float = 0.0
    interrupted: bool = False

    @property
    def records_per_minute(self) -> float:
        return 60.0 * self.records / self.seconds if self.seconds else 0.0


def dataset_kernels(
    models: list[str], batch_sizes: tuple[int, ...] = (1,), sizes: tuple[int | None, ...] = (None,)
) -> list[DatasetKernel]:
    """Kernels of ``models`` at every batch size and input size, deduplicated by workload."""
    from ..frontend import from_zoo
    from ..tasks import extract_kernels

    target = get_config("host").tvm_target()
    found: dict[str, DatasetKernel] = {}
    for name in models:
        for batch in batch_sizes:
            for size in sizes:
                tag = f"{name}@b{batch}" + (f"s{size}" if size else "")
                for k in extract_kernels(from_zoo(name, batch, size).mod, target):
                    entry = found.setdefault(k.workload_hash, DatasetKernel(k))
                    entry.models.append(tag)
                    entry.weights.append(k.weight)
    return list(found.values())


def collect(
    out: str,
    kernels: list[DatasetKernel],
    configs: list[str],
    per_kernel: int,
    seed: int = 0,
    on_kernel: Callable[[DatasetKernel, CollectStats], None] | None = None,
    rpc: str | None = None,
    key: str | None = None,
    programs_from: str | None = None,
    trajectory: int = 0,
) -> CollectStats:
    """Sample and measure ``per_kernel`` schedules of every kernel on every configuration:
    here, or on every RPC server with ``key`` at the tracker ``rpc`` (``HOST:PORT``), whose
    device is then described (and measured) through an RPC session. ``programs_from``: measure
    the programs of that hardware id's records instead of sampling; ``trajectory``: also the
    programs of a search of that many trials per kernel (see the module doc)."""
    load_cpu_tensor_intrinsics()
    cfgs = [get_config(c) for c in configs]
    twice = sorted({c.name for c in cfgs if [d.name for d in cfgs].count(c.name) > 1})
    if twice:  # one partition each: the same hardware twice would measure everything twice
        raise DatasetError(f"the configurations name {', '.join(twice)} more than once")
    sampling = {"seed": seed, "target": cfgs[0].target}
    store = DatasetStore(
        out, create=programs_from is None,
        meta={"evaluator": _evaluator_json(), "sampling": sampling, "created": time.time()},
    )  # fmt: skip
    _check_resume(store, None if programs_from else sampling)
    stored = stored_programs(store, programs_from) if programs_from else None
    part = _describe_new(store, cfgs, rpc, key)
    done = _done(store)
    searched = part[cfgs[0].name]  # the partition whose trajectories are the kernels' own
    visited = programs(store, searched, "trajectory") if trajectory and stored is None else {}
    texts = space_texts(store) if trajectory and stored is None else {}
    unsearchable = set(store.meta.get("unsearchable", []))  # kernels a search cannot run
    have_workloads = set(store.read("workloads", ["workload"])["workload"].to_pylist())
    _write_occurrences(store, kernels)
    feats = store.read("features", ["workload", "sample"]).to_pydict()
    have_features = set(zip(feats["workload"], feats["sample"], strict=True))
    groups: dict[str, list[TargetConfig]] = {}
    for c in cfgs:
        groups.setdefault(_build_key(c), []).append(c)
    runners = {c.name: _runner(c, rpc, key) for c in cfgs}
    first = runners[cfgs[0].name]  # the trajectories' search measures on it, synchronously here
    search_runner = SyncRunner(first) if rpc is None else first
    stats = CollectStats()
    start = time.perf_counter()
    # Ctrl-C stops after the kernel being measured (an interrupt inside TVM's builder would
    # surface as an FFI error instead), a second one at once (that kernel's measurements not
    # yet written are lost); every file written so far is whole.
    stop = threading.Event()

    def interrupt(*_) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print("stopping after this kernel (Ctrl-C again: now)", file=sys.stderr, flush=True)

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, interrupt) if main else None
    try:
        with warm_builder() as builder:
            for dk in kernels:
                if stop.is_set():
                    stats.interrupted = True
                    break
                k = dk.kernel
                held = [done.get((k.workload_hash, part[c.name]), set()) for c in cfgs]
                missing = max(per_kernel - sum(i < TRAJECTORY_BASE for i in h) for h in held)
                if trajectory and stored is None:  # a search to run, or its programs to measure
                    found = {i for i, _, _ in visited.get(k.workload_hash, ())}
                    unsearched = not found and k.workload_hash not in unsearchable
                    missing += unsearched or any(found - h for h in held)
                elif trajectory:  # the stored trajectory's programs, where they are missing
                    found = {p[0] for p in stored[0].get(k.workload_hash, ())
                             if p[0] >= TRAJECTORY_BASE}  # fmt: skip
                    missing += any(set(sorted(found)[:trajectory]) - h for h in held)
                featured = all((k.workload_hash, s) in have_features for s in set().union(*held))
                if missing <= 0 and featured:
                    stats.kernels_skipped += 1
                    continue
                spaces, postprocs = design_spaces(k.mod, cfgs[0].tvm_target())
                if not spaces or (stored is not None and not stored[0].get(k.workload_hash)):
                    stats.kernels_without_space += 1
                    continue
                if k.workload_hash not in have_workloads:
                    _write_workload(store, dk, spaces)
                    have_workloads.add(k.workload_hash)
                    if trajectory:  # so that a trajectory's new spaces get ids after these
                        texts.update({(k.workload_hash, i): t for i, t in enumerate(spaces)})
                if stored is None:
                    seed_k = kernel_seed(k.workload_hash, seed)
                    samples = sample(k.mod, spaces, postprocs, per_kernel, seed_k)
                    if trajectory:
                        timed: dict[int, list[float]] = {}
                        found = trajectory_of(store, k, cfgs[0], trajectory, seed_k, builder,
                                              search_runner, visited, texts, timed)  # fmt: skip
                        if found is None:  # interrupted inside the search
                            stats.interrupted = True
                            break
                        if not found:  # never searched again (its untuned build does not run)
                            unsearchable.add(k.workload_hash)
                            store.update_meta(unsearchable=sorted(unsearchable))
                        more, failed = rebuilt(k, (visited, texts), postprocs, 0, trajectory)
                        samples += more
                        stats.not_rebuilt += failed
                        here = done.setdefault((k.workload_hash, part[cfgs[0].name]), set())
                        reuse = [s for s in more if s.index in timed and s.index not in here]
                        _write_timed(store, k, reuse, timed, part[cfgs[0].name], stats)
                        here.update(s.index for s in reuse)
                else:
                    samples, failed = rebuilt(k, stored, postprocs, per_kernel, trajectory)
                    stats.not_rebuilt += failed
                for group in groups.values():
                    have = {c.name: done.get((k.workload_hash, part[c.name]), set()) for c in group}
                    todo = [s for s in samples if any(s.index not in h for h in have.values())]
                    if todo:
                        _measure_group(store, k, todo, group, builder, runners, stats, have, part)
                unfeatured = [s for s in samples if (k.workload_hash, s.index) not in have_features]
                if unfeatured:
                    _write_features(store, k, unfeatured, cfgs[0])
                    have_features.update((k.workload_hash, s.index) for s in unfeatured)
                stats.kernels_done += 1
                stats.seconds = time.perf_counter() - start
                if on_kernel is not None:
                    on_kernel(dk, stats)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    stats.seconds = time.perf_counter() - start
    store.compact()
    return stats


def _measure_group(store, kernel, todo, group, builder, runners, stats, have, part) -> None:
    """Build ``todo`` once for the group's configurations, time each on those that lack it."""
    target = group[0].tvm_target()
    needed = [c for c in group if any(s.index not in have[c.name] for s in todo)]
    measured = measure_on(
        [s.schedule.mod for s in todo], target, builder, [runners[c.name] for c in needed]
    )
    now = time.time()
    for i, config in enumerate(needed):
        rows = []
        for s, row in zip(todo, measured, strict=True):
            if s.index in have[config.name]:
                continue
            m = row[i]
            rows.append({
                "workload": kernel.workload_hash, "sample": s.index, "space": s.space,
                "decisions": s.decisions, "run_secs": m.run_secs, "mean_secs": m.seconds,
                "status": m.status, "error": m.error, "collected": now,
                "source": "trajectory" if s.index >= TRAJECTORY_BASE else "random",
            })  # fmt: skip
            stats.records += 1
            stats.failures += m.status != "ok"
        store.write("records", rows, part[config.name])


def _write_timed(store, kernel, samples, timed: dict, part: str, stats: CollectStats) -> None:
    """Records of ``samples`` with the run times a search measured them at (``timed``)."""
    now, rows = time.time(), []
    for s in samples:
        run_secs = timed[s.index]
        rows.append({
            "workload": kernel.workload_hash, "sample": s.index, "space": s.space,
            "decisions": s.decisions, "run_secs": run_secs,
            "mean_secs": sum(run_secs) / len(run_secs), "status": "ok", "error": None,
            "collected": now, "source": "trajectory",
        })  # fmt: skip
    store.write("records", rows, part)
    stats.records += len(rows)
    stats.reused += len(rows)


def _write_workload(store: DatasetStore, dk: DatasetKernel, spaces: list[str]) -> None:
    """The kernel's design spaces, then its workload row: a workload present means its spaces
    are (a kill between the two writes leaves spaces only, and the rerun writes both)."""
    k = dk.kernel
    store.write(
        "spaces",
        [{"workload": k.workload_hash, "space": i, "insts": s} for i, s in enumerate(spaces)],
    )
    mod = workload_json(k.mod)[1]
    store.write("workloads", [{
        "workload": k.workload_hash, "kernel_class": k.kernel_class, "flops": k.flops,
        "mod": str(mod), "models": dk.models, "weights": dk.weights,
    }])  # fmt: skip


def _write_occurrences(store: DatasetStore, kernels: list[DatasetKernel]) -> None:
    """Record the model tags of kernels already in the dataset that it does not list yet."""
    known = store.occurrences()
    store.write("occurrences", [
        {"workload": dk.kernel.workload_hash, "model": m, "weight": w}
        for dk in kernels if dk.kernel.workload_hash in known
        for m, w in zip(dk.models, dk.weights, strict=True)
        if m not in known[dk.kernel.workload_hash]
    ])  # fmt: skip


def _write_features(store: DatasetStore, kernel: Kernel, samples, config: TargetConfig) -> None:
    from ..schedules import per_store_features

    values = per_store_features(kernel.mod, [s.schedule for s in samples], config.tvm_target())
    store.write("features", [
        {"workload": kernel.workload_hash, "sample": s.index, "n_stores": int(v.shape[0]),
         "values": v.reshape(-1).tolist()}
        for s, v in zip(samples, values, strict=True)
    ])  # fmt: skip


def _done(store: DatasetStore) -> dict[tuple[str, str], set[int]]:
    done: dict[tuple[str, str], set[int]] = {}
    table = store.read("records", ["workload", "sample"])
    for w, s, t in zip(
        *(table[c].to_pylist() for c in ("workload", "sample", "target")), strict=True
    ):
        done.setdefault((w, t), set()).add(s)
    return done


def _runner(config: TargetConfig, rpc: str | None, key: str | None):
    if rpc is None:
        return local_runner(EVALUATOR, num_threads=config.num_threads)
    from ..rpc import rpc_runner

    return rpc_runner(rpc, key, EVALUATOR, num_threads=config.num_threads)


def _check_resume(store: DatasetStore, sampling: dict | None) -> None:
    """Refuse to add to a dataset sampled or measured otherwise than this run would
    (``sampling`` None: this run samples nothing)."""
    for name, now in (("evaluator", _evaluator_json()), ("sampling", sampling)):
        then = store.meta.get(name)
        if then is not None and now is not None and then != now:
            raise DatasetError(
                f"{store.path} was collected with {name} {json.dumps(then)}; this run uses "
                f"{json.dumps(now)} (give the same seed and first --targets entry, or another "
                "--out)"
            )


def _describe_new(
    store: DatasetStore, cfgs: list[TargetConfig], rpc: str | None, key: str | None
) -> dict[str, str]:
    """Describe the configurations the dataset lacks; returns {config name: partition id}.
    An RPC device is described every time: which CPU it is decides its id."""
    part, rows = {}, []
    for c in cfgs:
        if rpc is None and store.check_hardware(c.name, c.fingerprint):
            part[c.name] = c.name
            continue
        if rpc is None:
            d = describe(c)
        else:
            from ..rpc import connect

            d = describe(c, connect(rpc, key), machine=f"{key}@{rpc}")
        part[c.name] = d.id
        if not store.check_hardware(d.id, d.fingerprint) and d.id not in {r["id"] for r in rows}:
            rows.append({"id": d.id, "config": c.alias or c.name, "target": json.dumps(c.target),
                         "descriptor": json.dumps(d.as_dict())})  # fmt: skip
    store.write("hardware", rows)
    return part


def _build_key(config: TargetConfig) -> str:
    """Configs with equal keys compile to the same code (they differ in thread count only)."""
    return json.dumps({k: v for k, v in config.target.items() if k != "num-cores"}, sort_keys=True)


def _evaluator_json() -> dict:
    return {
        "number": EVALUATOR.number, "repeat": EVALUATOR.repeat,
        "min_repeat_ms": EVALUATOR.min_repeat_ms, "cache_flush": False,
    }  # fmt: skip
