"""TVM targets for this host and named *target configurations* of it.

A target configuration is one way of compiling for, and running on, a machine: the full ISA
and all cores, or a restricted ISA level (``-mcpu``) or thread count on the same CPU. They are
configurations of one host, not different hardware, and are named as such
(``host``, ``host-1core``, ``host-avx2``, ``host-avx2-1core``, ``host-sse4.2``,
``host-sse4.2-1core``).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from .errors import TargetError

# LLVM feature names that are ISA extensions (what a CPU must execute), as opposed to tuning
# flags such as "fast-gather" or "slow-3ops-lea". Compared with /proc/cpuinfo after
# normalisation (lower case, '.', '_' and '-' removed).
_ISA_PREFIXES = ("sse", "ssse", "avx", "amx", "fma", "f16c", "bmi", "sha", "aes", "vaes", "gfni")

# Restricted ISA levels of an x86 host: LLVM CPU names whose feature sets every x86-64-v4 host
# (and Zen 4) has.
_ISA_LEVELS = {"avx2": "haswell", "sse4.2": "nehalem"}


# LLVM names whose /proc/cpuinfo flag differs (after normalisation).
_CPUINFO_ALIASES = {"sse3": "pni", "bmi": "bmi1", "sha": "shani"}


def _norm(feature: str) -> str:
    name = feature.lower().replace(".", "").replace("_", "").replace("-", "")
    return _CPUINFO_ALIASES.get(name, name)


@dataclass(frozen=True)
class HostInfo:
    """What this machine is: CPU model, LLVM CPU name, ISA extensions and usable cores."""

    cpu_model: str
    mcpu: str
    arch: str
    cores: int
    isa: frozenset[str] = field(repr=False)

    @property
    def simd(self) -> str:
        for name, width in (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse42", 128)):
            if name in self.isa:
                return f"{name} ({width}-bit)"
        return "scalar"


@cache
def host_info() -> HostInfo:
    """Detect this host (cached)."""
    from tvm.target import codegen

    cpu_model, flags = platform.processor() or "unknown", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and cpu_model in ("unknown", platform.machine()):
                    cpu_model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = value
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return HostInfo(
        cpu_model=cpu_model,
        mcpu=str(codegen.llvm_get_system_cpu()),
        arch=platform.machine(),
        cores=cores or 1,
        isa=frozenset(_norm(f) for f in flags.split()),
    )


@dataclass(frozen=True)
class TargetConfig:
    """A named way to compile for and run on a device: TVM target dict plus thread count."""

    name: str
    target: dict[str, Any]
    num_threads: int
    description: str

    def tvm_target(self):
        """The ``tvm.target.Target`` (dict form, as TVM 0.27 requires)."""
        return make_target(self.target)


def make_target(spec: dict[str, Any] | str):
    """Build a ``tvm.target.Target`` from a dict, or from a kind name such as ``"llvm"``."""
    import tvm

    if isinstance(spec, str):
        spec = {"kind": spec}
    try:
        return tvm.target.Target(dict(spec))
    except Exception as err:  # TVM raises its own error types for bad target dicts
        raise TargetError(f"invalid target {spec!r}: {str(err).splitlines()[-1]}") from None


def host_configs() -> dict[str, TargetConfig]:
    """The named target configurations of this host."""
    host = host_info()
    base = {"kind": "llvm", "mcpu": host.mcpu}
    configs = [
        TargetConfig(
            "host",
            {**base, "num-cores": host.cores},
            host.cores,
            f"this host ({host.cpu_model}), full ISA ({host.mcpu}), {host.cores} cores",
        ),
        TargetConfig(
            "host-1core",
            {**base, "num-cores": 1},
            1,
            f"this host, full ISA ({host.mcpu}), restricted to 1 thread",
        ),
    ]
    if host.arch in ("x86_64", "AMD64"):
        for level, mcpu in _ISA_LEVELS.items():
            for cores, suffix in ((host.cores, ""), (1, "-1core")):
                configs.append(
                    TargetConfig(
                        f"host-{level}{suffix}",
                        {"kind": "llvm", "mcpu": mcpu, "num-cores": cores},
                        cores,
                        f"this host, code restricted to {level.upper()} (-mcpu={mcpu}), "
                        + (f"{cores} cores" if cores > 1 else "1 thread"),
                    )
                )
    return {c.name: c for c in configs}


def get_config(name: str | None = None) -> TargetConfig:
    """A target configuration by name (default ``host``), or a custom one from a JSON target
    dict such as ``'{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}'``.

    Raises ``TargetError`` for an unknown name or a target this host cannot run.
    """
    configs = host_configs()
    name = name or "host"
    if name.lstrip().startswith("{"):
        try:
            spec = json.loads(name)
        except json.JSONDecodeError as err:
            raise TargetError(f"target is neither a configuration name nor JSON: {err}") from None
        make_target(spec)
        threads = int(spec.get("num-cores", host_info().cores))
        config = TargetConfig(spec.get("mcpu", spec["kind"]), spec, threads, f"custom: {name}")
    elif name in configs:
        config = configs[name]
    else:
        raise TargetError(f"unknown target configuration {name!r}; known: {', '.join(configs)}")
    check_runnable(config.target)
    return config


def missing_isa(spec: dict[str, Any]) -> list[str]:
    """ISA extensions that code for ``spec`` may use but this host lacks (empty if runnable)."""
    from tvm.target import codegen

    if spec.get("kind") != "llvm":
        return []
    host = host_info()
    target = make_target(spec)
    wanted = {_norm(f) for f in codegen.llvm_get_cpu_features(target)}
    wanted = {f for f in wanted if f.startswith(_ISA_PREFIXES)}
    for attr in target.attrs.get("mattr", ()) or ():
        name = _norm(str(attr).lstrip("+-"))
        (wanted.discard if str(attr).startswith("-") else wanted.add)(name)
    return sorted(wanted - host.isa)


def check_runnable(spec: dict[str, Any]) -> None:
    """Raise ``TargetError`` unless code built for ``spec`` can run on this host."""
    import tvm

    kind = spec.get("kind")
    if kind == "llvm":
        missing = missing_isa(spec)
        if missing:
            raise TargetError(
                f"target {spec.get('mcpu', '')!r} needs {', '.join(missing)}, which this host "
                f"({host_info().cpu_model}) does not have"
            )
    elif kind == "cuda":
        if not tvm.cuda(0).exist:
            raise TargetError("target 'cuda' needs a CUDA GPU, and this host has none")
    else:
        raise TargetError(f"target kind {kind!r} cannot run on this host (llvm or cuda)")
