"""Hardware descriptors: what a target configuration runs on, as numbers a cost model can use.

A descriptor's ``id`` is the configuration's hardware id (:mod:`.machine`:
``epyc-znver4-2c-avx2`` is a configuration of one Zen 4 CPU, code restricted to AVX2), its
``config`` the alias it was described under (``host-avx2``) and its ``fingerprint`` what the id
stands for (CPU vendor, model name, family/model/stepping, LLVM CPUs, threads, cache sizes),
which stores compare before they write. The ISA level comes from the target (LLVM's features
of its ``mcpu``), cache sizes and clock from the device's sysfs, and memory bandwidth and peak
GFLOP/s are *measured* with two small TVM kernels built for the configuration (so an
SSE4.2-only build shows SSE4.2's peak) and run on its thread count. A device behind TVM's RPC
is described the same way through its session: sysfs files are downloaded, the kernels are
uploaded and timed there.

- bandwidth: a STREAM-like triad ``a = b + 3 c`` over 3 x 64 MiB arrays (12 bytes per element);
- peak: independent chains of fused multiply-adds held in registers (2 FLOPs each), enough
  chains in flight to cover the FMA latency of every pipe.
"""

from __future__ import annotations

import functools
import math
import platform
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from .machine import cache_sizes, fingerprint, hardware_id, host_info, read_local
from .targets import TargetConfig, get_config

# Vector ISA levels (LLVM feature names), widest first, and their register width in bits.
_SIMD_BITS = {"avx512f": 512, "avx2": 256, "avx": 256, "sse4.2": 128, "sse2": 128, "neon": 128}
_CPU = "/sys/devices/system/cpu/cpu0"
_VENDORS = {0: "GenuineIntel", 2: "AuthenticAMD", 3: "UMC", 5: "CentaurHauls", 10: "HygonGenuine"}


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
    fingerprint: dict[str, Any] = field(default_factory=dict)

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
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def describe(
    config: TargetConfig | str | None = None, session=None, machine: str | None = None
) -> HardwareDescriptor:
    """Describe (and measure) a CPU target configuration of this host, or of the device behind
    an RPC ``session`` (from :func:`transtune.rpc.connect`; name it with ``machine``)."""
    if not isinstance(config, TargetConfig):
        config = get_config(config)
    if config.target.get("kind") != "llvm":
        raise ValueError(f"{config.name}: only CPU (llvm) configurations can be described here")
    from .measure import measure_peak
    from .targets import cpu_features

    features = cpu_features(config.tvm_target())
    isa = next((name for name in _SIMD_BITS if name in features), "scalar")
    if session is None:
        read = read_local
        machine, device = machine or platform.node() or "localhost", host_info().cpu_model
        caches, fp, hw_id = host_info().caches, config.fingerprint, config.name
    else:
        read = functools.partial(_read_remote, session)
        machine = machine or "rpc-device"
        device = str(config.target.get("mcpu") or "unknown")
        caches = cache_sizes(read)
        cpu = _remote_cpu(read, config, caches)
        fp = fingerprint(cpu, device, config.num_threads)
        # The same CPU as the configuration's keeps its id; another gets its own.
        if _same_cpu(fp, config.fingerprint):
            hw_id, fp = config.name, config.fingerprint
        else:
            hw_id = hardware_id(cpu, device, config.num_threads)
    bandwidth, peak = measure_peak(config, _SIMD_BITS.get(isa, 64), session)
    return HardwareDescriptor(
        id=hw_id,
        config=config.alias or config.name,
        machine=machine,
        kind="cpu",
        device=device,
        threads=config.num_threads,
        isa=isa,
        simd_bits=_SIMD_BITS.get(isa, 64),
        clock_ghz=_clock_ghz(read),
        l1d_kib=caches.get("L1d", 32.0),
        l2_kib=caches.get("L2", 1024.0),
        l3_kib=caches.get("L3", caches.get("L2", 1024.0)),
        measured_bandwidth_gbs=bandwidth,
        measured_peak_gflops=peak,
        fingerprint=fp,
    )


def _remote_cpu(read, config: TargetConfig, caches: dict[str, float]) -> dict:
    """What the RPC device's sysfs says of its CPU: vendor, family and model from
    ``modalias`` (an RPC server cannot read /proc/cpuinfo), caches; no model name."""
    try:
        alias = read("/sys/devices/system/cpu/modalias")
    except OSError:
        alias = ""
    found = re.search(r"ven([0-9A-F]{4})fam([0-9A-F]{4})mod([0-9A-F]{4})", alias)
    vendor, family, model = (int(x, 16) for x in found.groups()) if found else (-1, "", "")
    return {
        "vendor": _VENDORS.get(vendor, "unknown"), "model_name": "", "family": str(family),
        "model": str(model), "stepping": "", "host_mcpu": str(config.target.get("mcpu", "")),
        "l1d_kib": caches.get("L1d"), "l2_kib": caches.get("L2"), "l3_kib": caches.get("L3"),
    }  # fmt: skip


def _read_remote(session, path: str) -> str:
    """A sysfs file of the RPC device (the server's download resolves absolute paths as is)."""
    try:
        return bytes(session.download(path)).rstrip(b"\0").decode()
    except Exception as err:  # RPCError: no such file on the device
        raise OSError(str(err)) from None


def _same_cpu(remote: dict, local: dict) -> bool:
    """Whether what the RPC device shows of its CPU matches a configuration's fingerprint."""
    keys = ("vendor", "family", "model", "host_mcpu", "l1d_kib", "l2_kib", "l3_kib", "mcpu")
    return all(remote.get(k) == local.get(k) for k in keys)


def _clock_ghz(read) -> float:
    try:
        return int(read(f"{_CPU}/cpufreq/cpuinfo_max_freq")) / 1e6
    except (OSError, ValueError):
        pass
    if read is read_local:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("cpu MHz"):
                        return float(line.split(":")[1]) / 1e3
        except OSError:
            pass
    return 0.0
