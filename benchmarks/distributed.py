"""Distributed measurement benchmark -> docs/results/distributed.md.

The same dataset collection (ResNet-18 kernels, sampled schedules, configuration
``host-1core``) three ways, one after the other in this process: the local runner, then
through a real RPC tracker on loopback with 1 server, then with 2 servers. All servers run on
this one host: two 1-thread servers measure side by side on its two cores (sharing caches and
memory), so the figures show the plumbing's throughput and its cost in timing agreement, not
what two separate devices would give.

    python benchmarks/distributed.py [--kernels 4] [--samples 24]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

from common import meta_line, write_result

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results"
DATA = OUT / "distributed"
CONFIG = "host-1core"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(kernels, samples: int, servers: int) -> dict:
    """Collect into a fresh directory; ``servers`` = 0 means the local runner."""
    from transtune.dataset import collect, load_records
    from transtune.rpc import LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "ds")
        cluster = LocalCluster(servers, "bench", port=free_port()).start() if servers else None
        try:
            start = time.perf_counter()
            rpc = {"rpc": cluster.tracker, "key": "bench"} if cluster else {}
            stats = collect(out, kernels, [CONFIG], samples, **rpc)
            seconds = time.perf_counter() - start
        finally:
            if cluster:
                cluster.stop()
        table, _ = load_records(out, ["workload", "sample", "mean_secs", "status"])
    rows = table.select(["workload", "sample", "mean_secs", "status"]).to_pydict()
    latency = {f"{w}:{s}": m for w, s, m, st in zip(*rows.values(), strict=True) if st == "ok"}
    return {
        "servers": servers, "records": stats.records, "failures": stats.failures,
        "seconds": seconds, "records_per_minute": 60 * stats.records / seconds,
        "latency": latency,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument("--samples", type=int, default=24)
    args = parser.parse_args()
    from transtune.dataset import dataset_kernels
    from transtune.measure import load_cpu_tensor_intrinsics
    from transtune.targets import get_config

    load_cpu_tensor_intrinsics()
    kernels = sorted(dataset_kernels(["resnet18"]), key=lambda dk: dk.kernel.name)
    kernels = kernels[: args.kernels]
    runs = [run(kernels, args.samples, servers) for servers in (0, 1, 2)]
    result = write_result(DATA / "runs.json", {"runs": runs}, get_config(CONFIG).num_threads)

    local = runs[0]["latency"]
    lines = [
        "# Measuring through TVM's RPC tracker: 1 and 2 servers on one host",
        "",
        f"Written by `benchmarks/distributed.py`. {meta_line(result['meta'])} "
        "The same collection each time: "
        f"{len(kernels)} ResNet-18 kernels x {args.samples} sampled schedules, configuration "
        f"`{CONFIG}` (1 thread per measurement), dataset evaluator, builds here (2 warm "
        "workers) between measured batches. A real tracker and real `tvm.exec.rpc_server` "
        "processes on 127.0.0.1. **All on one 2-core host**: two servers measure side by side "
        "on its two cores, sharing caches and memory bandwidth; with separate devices the "
        "measuring part would scale without that interference.",
        "",
        "| runner | records | failed | seconds | records/min | vs local | median latency "
        "vs local (same schedules) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        name = "local runner" if r["servers"] == 0 else f"RPC, {r['servers']} server(s)"
        common = [k for k in r["latency"] if k in local]
        agree = statistics.median(r["latency"][k] / local[k] for k in common) if common else 0
        lines.append(
            f"| {name} | {r['records']} | {r['failures']} | {r['seconds']:.0f} | "
            f"{r['records_per_minute']:.0f} | "
            f"{r['records_per_minute'] / runs[0]['records_per_minute']:.2f}x | {agree:.3f} |"
        )
    lines += [
        "",
        "Each RPC measurement opens a session through the tracker, uploads the shared "
        "library and times it there; the runner hands each batch to all servers at once "
        "(one worker per registered server). See `docs/distributed.md` for pointing it at "
        "real devices.",
        "",
    ]
    (OUT / "distributed.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
