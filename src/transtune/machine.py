"""What a machine is: its CPU's identity, and the hardware ids derived from it.

Data measured on a CPU (dataset partitions and descriptors, library targets and runs,
checkpoints, benchmark results) is keyed by a *hardware id*, a short readable name derived
from what the code runs on: ``epyc-znver4-2c`` (the CPU's name, its LLVM ``mcpu``, cores
used), ``epyc-znver4-1c-avx2`` (the same CPU, code restricted to AVX2, one thread). Two
machines whose CPUs differ in vendor, model name, family/model/stepping, LLVM CPU or cache
sizes have different *fingerprints*; stores compare the fingerprint behind an id before they
write, so data of one CPU is never filed under another's id. ``host``, ``host-1core``, ...
are aliases (:mod:`.targets`) that resolve to this machine's ids.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

# LLVM names whose /proc/cpuinfo flag differs (after normalisation).
_CPUINFO_ALIASES = {"sse3": "pni", "bmi": "bmi1", "sha": "shani"}
_CPU = "/sys/devices/system/cpu/cpu0"
# Words of a CPU model name that say nothing about which CPU it is.
_NOISE = {"amd", "intel", "genuine", "authentic", "cpu", "processor", "core", "with", "radeon"}


def norm_feature(feature: str) -> str:
    """An ISA feature name as /proc/cpuinfo spells it (lower case, no '.', '_' or '-')."""
    name = feature.lower().replace(".", "").replace("_", "").replace("-", "")
    return _CPUINFO_ALIASES.get(name, name)


@dataclass(frozen=True)
class HostInfo:
    """What this machine is: CPU identity, LLVM CPU name, ISA extensions, usable cores and
    per-core cache sizes (KiB)."""

    cpu_model: str
    mcpu: str
    arch: str
    cores: int
    isa: frozenset[str] = field(repr=False)
    vendor: str = "unknown"
    family: str = ""
    model: str = ""
    stepping: str = ""
    caches: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def simd(self) -> str:
        for name, width in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse42", 128)):
            if name in self.isa:
                return f"{name} ({width}-bit)"
        return "scalar"

    def cpu(self) -> dict:
        """The CPU's identity (what a fingerprint holds apart from the configuration)."""
        return {
            "vendor": self.vendor, "model_name": self.cpu_model, "family": self.family,
            "model": self.model, "stepping": self.stepping, "host_mcpu": self.mcpu,
            "l1d_kib": self.caches.get("L1d"), "l2_kib": self.caches.get("L2"),
            "l3_kib": self.caches.get("L3"),
        }  # fmt: skip


@cache
def host_info() -> HostInfo:
    """Detect this host (cached)."""
    from .targets import llvm_host_cpu

    cpuinfo = _cpuinfo()
    model_name = cpuinfo.get("model name") or platform.processor() or platform.machine()
    flags = cpuinfo.get("flags") or cpuinfo.get("Features") or ""
    return HostInfo(
        cpu_model=model_name,
        mcpu=llvm_host_cpu(),
        arch=platform.machine(),
        cores=usable_cpus(),
        isa=frozenset(norm_feature(f) for f in flags.split()),
        vendor=cpuinfo.get("vendor_id") or cpuinfo.get("CPU implementer") or "unknown",
        family=cpuinfo.get("cpu family") or cpuinfo.get("CPU architecture") or "",
        model=cpuinfo.get("model") or cpuinfo.get("CPU part") or "",
        stepping=cpuinfo.get("stepping") or cpuinfo.get("CPU revision") or "",
        caches=cache_sizes(read_local),
    )


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity mask where the OS has one)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cpus or 1


def configure_threads(num_threads: int | None = None) -> None:
    """Size TVM's runtime thread pool before it starts, in this process and the workers it
    spawns (they inherit the environment): ``TVM_NUM_THREADS`` to ``num_threads`` (default:
    every CPU this process may run on, unless the variable is set) and ``TVM_BIND_THREADS=0``
    (unless set). Called where transtune starts TVM work: lowering a model, runner workers,
    each timed run, the CLI. Call it yourself before running TVM kernels of your own.

    Why: on x86 TVM assumes hyper-threading and uses half the logical CPUs (one thread on a
    2-vCPU host), and ``runtime.config_threadpool`` can lower that count later but not raise
    it; and when TVM sizes its pool it pins the calling thread to one core, a mask every
    thread and process started afterwards inherits (PyTorch, ONNX Runtime, MetaSchedule
    workers)."""
    if num_threads is None:
        os.environ.setdefault("TVM_NUM_THREADS", str(usable_cpus()))
    else:
        os.environ["TVM_NUM_THREADS"] = str(int(num_threads))
    os.environ.setdefault("TVM_BIND_THREADS", "0")


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    if out:
                        break
                    continue
                key, _, value = line.partition(":")
                out.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return out


def read_local(path: str) -> str:
    return Path(path).read_text()


def cache_sizes(read: Callable[[str], str]) -> dict[str, float]:
    """Per-core cache sizes in KiB from sysfs (``L1d``, ``L2``, ``L3``), read with ``read``
    (here, or on an RPC device)."""
    out: dict[str, float] = {}
    for i in range(8):
        index = f"{_CPU}/cache/index{i}"
        try:
            level, kind, size = (
                read(f"{index}/{name}").strip() for name in ("level", "type", "size")
            )
        except OSError:
            break
        if kind == "Instruction":
            continue
        scale = {"K": 1.0, "M": 1024.0, "G": 1024.0 * 1024}.get(size[-1], 1 / 1024)
        out["L1d" if level == "1" else f"L{level}"] = float(size.rstrip("KMG")) * scale
    return out


def fingerprint(cpu: dict, mcpu: str, threads: int) -> dict:
    """What a configuration runs on: the CPU's identity, the code's LLVM CPU and threads."""
    return {**cpu, "mcpu": mcpu, "threads": int(threads)}


def fingerprint_json(fp: dict) -> str:
    return json.dumps(fp, sort_keys=True, separators=(",", ":"))


def cpu_short_name(model_name: str, vendor: str = "") -> str:
    """A CPU's family name from its model name: ``AMD EPYC 7B13`` -> ``epyc``,
    ``Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz`` -> ``xeon``."""
    text = re.sub(r"\((r|tm)\)", " ", model_name.lower())
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w and w not in _NOISE]
    words = [w for w in words if not w[0].isdigit()]
    if words:
        return words[0]
    return re.sub(r"[^a-z0-9]+", "", vendor.lower().replace("authentic", "").replace("genuine", ""))


def hardware_id(cpu: dict, mcpu: str, threads: int, level: str | None = None) -> str:
    """The readable id of a configuration: ``epyc-znver4-2c``, ``epyc-znver4-1c-avx2``.

    ``level`` names a restricted ISA (``avx2``); code built for another LLVM CPU than the
    host's, without a level name, gets that CPU's name instead."""
    name = cpu_short_name(cpu.get("model_name", ""), cpu.get("vendor", "")) or "cpu"
    host_mcpu = cpu.get("host_mcpu") or mcpu
    out = f"{name}-{host_mcpu}-{int(threads)}c"
    suffix = level or (mcpu if mcpu != host_mcpu else "")
    return f"{out}-{suffix}" if suffix else out


def cpu_of(hardware_id: str) -> str:
    """The CPU part of a hardware id, without threads and ISA level (``epyc-znver4`` of
    ``epyc-znver4-2c-avx2``; see :func:`hardware_id`)."""
    return re.sub(r"-\d+c(-.*)?$", "", hardware_id)


def fingerprint_difference(stored: dict, current: dict) -> str:
    """The fields in which two fingerprints differ, as ``field: a != b`` (empty if none)."""
    keys = sorted(set(stored) | set(current))
    return ", ".join(
        f"{k}: {stored.get(k)!r} != {current.get(k)!r}"
        for k in keys
        if stored.get(k) != current.get(k)
    )


def as_dict(info: HostInfo) -> dict:
    """This host's identity and configuration facts, for ``transtune targets --json``."""
    out = asdict(info)
    out["isa"] = sorted(info.isa)
    return out
