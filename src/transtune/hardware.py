"""Hardware descriptors: what a target configuration runs on, as numbers a cost model can use.

A descriptor names the machine and the configuration separately: ``host-avx2`` on this host is
a *configuration* of one physical CPU (the code is restricted to AVX2), not another CPU, and
its id says so (``host-avx2@<machine>``). Cache sizes, clock and core count come from the OS;
memory bandwidth and peak GFLOP/s are *measured* with two small TVM kernels built for the
configuration (so an SSE4.2-only build shows SSE4.2's peak) and run on its thread count:

- bandwidth: a STREAM-like triad ``a = b + 3 c`` over 3 x 64 MiB arrays (12 bytes per element);
- peak: independent chains of multiply-adds held in registers (2 FLOPs each).
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from .targets import TargetConfig, get_config, host_info

_SIMD_BITS = {"avx512f": 512, "avx2": 256, "avx": 256, "sse42": 128, "sse2": 128}
# ISA features of the LLVM CPU names the host configurations use (see targets._ISA_LEVELS).
_MCPU_ISA = {"haswell": "avx2", "nehalem": "sse42"}


@dataclass(frozen=True)
class HardwareDescriptor:
    """One target configuration on one machine. ``measured_*`` fields are measured here."""

    id: str
    config: str
    machine: str
    kind: str  # "cpu" (the target kind's device type)
    device: str  # CPU model
    threads: int
    isa: str  # widest vector ISA the code may use
    simd_bits: int
    clock_ghz: float
    l1d_kib: float
    l2_kib: float
    l3_kib: float
    measured_bandwidth_gbs: float
    measured_peak_gflops: float

    # Numeric features, in this order, for cost models (sizes and rates on a log2 scale).
    FEATURES = (
        "threads", "simd_bits", "clock_ghz", "log2_l1d_kib", "log2_l2_kib", "log2_l3_kib",
        "log2_bandwidth_gbs", "log2_peak_gflops",
    )  # fmt: skip

    def vector(self) -> np.ndarray:
        values = [
            self.threads, self.simd_bits / 128, self.clock_ghz, math.log2(self.l1d_kib),
            math.log2(self.l2_kib), math.log2(self.l3_kib),
            math.log2(self.measured_bandwidth_gbs), math.log2(self.measured_peak_gflops),
        ]  # fmt: skip
        return np.asarray(values, dtype=np.float32)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HardwareDescriptor:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


def describe(config: TargetConfig | str | None = None) -> HardwareDescriptor:
    """Describe (and measure) a CPU target configuration of this host."""
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    if config.target.get("kind") != "llvm":
        raise ValueError(f"{config.name}: only CPU (llvm) configurations can be described here")
    host = host_info()
    isa = _MCPU_ISA.get(config.target.get("mcpu", host.mcpu))
    simd = _SIMD_BITS[isa] if isa else next(
        (bits for name, bits in _SIMD_BITS.items() if name in host.isa), 64
    )  # fmt: skip
    isa = isa or next((name for name in _SIMD_BITS if name in host.isa), "scalar")
    caches = _caches()
    bandwidth, peak = _measure(config)
    machine = platform.node() or "localhost"
    return HardwareDescriptor(
        id=f"{config.name}@{machine}",
        config=config.name,
        machine=machine,
        kind="cpu",
        device=host.cpu_model,
        threads=config.num_threads,
        isa=isa,
        simd_bits=simd,
        clock_ghz=_clock_ghz(),
        l1d_kib=caches.get("L1d", 32.0),
        l2_kib=caches.get("L2", 1024.0),
        l3_kib=caches.get("L3", caches.get("L2", 1024.0)),
        measured_bandwidth_gbs=bandwidth,
        measured_peak_gflops=peak,
    )


def _caches() -> dict[str, float]:
    """Per-core cache sizes in KiB, from sysfs (``L1d``, ``L2``, ``L3``)."""
    out: dict[str, float] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1.0, "M": 1024.0, "G": 1024.0 * 1024}.get(size[-1], 1 / 1024)
        out["L1d" if level == "1" else f"L{level}"] = float(size.rstrip("KMG")) * scale
    return out


def _clock_ghz() -> float:
    for path in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",):
        try:
            return int(Path(path).read_text()) / 1e6
        except (OSError, ValueError):
            pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1]) / 1e3
    except OSError:
        pass
    return 0.0


def _measure(config: TargetConfig) -> tuple[float, float]:
    """(GB/s of the triad, GFLOP/s of the FMA chains), best of 5 timed runs each."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    from .compile import set_num_threads

    target = config.tvm_target()
    set_num_threads(config.num_threads)
    lanes = 16

    def build(out, args, unroll: int = 1):
        sch = Schedule(te.create_prim_func([*args, out]))
        block = sch.get_sblock(out.op.name)
        (loop,) = sch.get_loops(block)
        outer, mid, inner = sch.split(loop, [None, unroll, lanes])
        sch.parallel(outer)
        sch.unroll(mid)
        sch.vectorize(inner)
        return tvm.compile(sch.mod, target=target)

    n = 16 << 20  # 64 MiB per float32 array
    b, c = te.placeholder((n,), name="b"), te.placeholder((n,), name="c")
    triad = build(te.compute((n,), lambda i: b[i] + 3.0 * c[i], name="a"), [b, c])
    arrays = [tvm.runtime.tensor(np.full(n, 1.0, "float32")) for _ in range(3)]
    bandwidth = 12.0 * n / _best_seconds(lambda: triad(*arrays)) / 1e9

    depth, m = 64, 4096 * config.num_threads
    x = te.placeholder((m,), name="x")

    def chain(i):
        v = x[i]
        for _ in range(depth):
            v = v * 0.999 + 0.001
        return v

    fma = build(te.compute((m,), chain, name="y"), [x], unroll=8)
    small = [tvm.runtime.tensor(np.full(m, 1.0, "float32")) for _ in range(2)]
    peak = 2.0 * depth * m / _best_seconds(lambda: fma(*small), number=200) / 1e9
    return bandwidth, peak


def _best_seconds(fn, number: int = 3, repeat: int = 5) -> float:
    fn()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best
