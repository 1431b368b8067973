"""Deep data for the cost-model issue: DEEP_SAMPLES random schedules and DEEP_TRAJECTORY
search-trajectory programs per kernel on the full-ISA configuration (``host``), for every
batch-1 kernel of TenSet's by-model test models, then for DEEP_TRAIN training kernels spread
over classes and FLOPs (:func:`deep_kernels`), into ``data/dataset``. On the CPU the dataset
samples for, the programs are drawn here; on another, the same programs, those of that CPU's
full-ISA configuration (:func:`replayed`), are measured here.

    python benchmarks/deep.py [--minutes M]   # resumable; alone on the host
    python benchmarks/dataset.py summary      # dataset.deep_kernels, dataset.deep_min_samples
"""

from __future__ import annotations

import argparse

from dataset import DATASET, MODELS, TEST_MODELS, cpus, full_isa

DEEP_SAMPLES = 256
DEEP_TRAJECTORY = 64  # programs a search visits per deep kernel, beside the random samples
DEEP_TRAIN = 150
GRACE_MINUTES = 10  # past the deadline, the kernel in hand is given up


def deep_kernels(train_count: int = DEEP_TRAIN) -> list:
    """Batch-1 kernels of the test models, then ``train_count`` kernels of the other models:
    classes in turn (largest total FLOPs first), each class's kernels in an order that
    spreads over its FLOPs range (median, extremes, then the middles of the gaps)."""
    from transtune.dataset import dataset_kernels

    test = dataset_kernels(TEST_MODELS)
    seen = {dk.kernel.workload_hash for dk in test}
    by_class: dict[str, list] = {}
    for dk in dataset_kernels([m for m in MODELS if m not in TEST_MODELS]):
        if dk.kernel.workload_hash not in seen:
            by_class.setdefault(dk.kernel.kernel_class, []).append(dk)
    queues = []
    for kernels in by_class.values():
        kernels.sort(key=lambda dk: (dk.kernel.flops, dk.kernel.workload_hash))
        queues.append([kernels[i] for i in _spread(len(kernels))])
    queues.sort(key=lambda q: -sum(dk.kernel.flops for dk in q))
    train = []
    while len(train) < train_count and any(queues):
        for q in queues:
            if q and len(train) < train_count:
                train.append(q.pop(0))
    return test + train


def _spread(n: int) -> list[int]:
    """0..n-1 in the order median, ends, then midpoints of the largest gaps."""
    if n <= 2:
        return list(range(n))
    order, intervals = [n // 2, 0, n - 1], [(0, n // 2), (n // 2, n - 1)]
    while len(order) < n:
        intervals.sort(key=lambda iv: iv[0] - iv[1])
        lo, hi = intervals.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        intervals += [(lo, mid), (mid, hi)]
    return order


def replayed() -> str | None:
    """None when ``host`` is the dataset's sampling target (programs are drawn here); else the
    hardware id of that target's configuration, whose programs ``host`` measures instead."""
    from transtune.dataset.store import DatasetStore
    from transtune.targets import get_config

    target = DatasetStore(DATASET).meta["sampling"]["target"]
    if get_config("host").target == target:
        return None
    source = full_isa(cpus().get(target["mcpu"], []), target.get("num-cores"))
    if source is None:
        raise SystemExit(f"{DATASET} holds no records of its sampling target {target}")
    return source


def collect(minutes: float) -> None:
    """Measure DEEP_SAMPLES random schedules of every deep kernel on ``host``, then (a second
    pass: a search costs about what the random samples do) the DEEP_TRAJECTORY programs a
    search visits, until ``minutes`` have passed (then, like Ctrl-C, it stops after the
    kernel in hand, or GRACE_MINUTES later at once, like a second Ctrl-C); what the dataset
    holds is skipped."""
    import signal

    from transtune.dataset import DatasetStore
    from transtune.dataset import collect as collect_dataset

    kernels, source = deep_kernels(), replayed()
    replay = f", the programs of {source} measured on host" if source else ""
    print(f"{len(kernels)} kernels{replay}", flush=True)

    def alarm(*_) -> None:
        signal.alarm(int(60 * GRACE_MINUTES))
        signal.raise_signal(signal.SIGINT)

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(max(1, int(60 * minutes)))

    def progress(dk, stats) -> None:
        print(f"{stats.kernels_done + stats.kernels_skipped}/{len(kernels)} "
              f"{dk.kernel.kernel_class} {stats.records} records "
              f"{stats.records_per_minute:.0f}/min", flush=True)  # fmt: skip

    try:
        for trajectory in (0, DEEP_TRAJECTORY):
            stats = collect_dataset(str(DATASET), kernels, ["host"], DEEP_SAMPLES, 0, progress,
                                    programs_from=source, trajectory=trajectory)  # fmt: skip
            print(stats, flush=True)
            if stats.interrupted:
                break
    except KeyboardInterrupt:
        print("stopped at once: the kernel in hand is measured again next time", flush=True)
        DatasetStore(str(DATASET)).compact()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    collect(parser.parse_args().minutes)
