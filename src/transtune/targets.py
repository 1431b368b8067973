"""TVM targets for this host and named *target configurations* of it.

A target configuration is one way of compiling for, and running on, a machine: the full ISA
and all cores, or a restricted ISA level (``-mcpu``) or thread count on the same CPU. Each is
named by its hardware id (:mod:`.machine`: ``epyc-znver4-2c``, ``epyc-znver4-1c-avx2``), under
which everything measured with it is stored, and has an alias that means "this machine"
(``host``, ``host-1core``, ``host-avx2``, ``host-avx2-1core``, ``host-sse4.2``,
``host-sse4.2-1core``). Either name selects it.

A configuration also fixes the *data layout* convolutions are lowered in before kernels are
extracted: ``NCHW`` (as models are imported) or ``NHWC`` (channels innermost, which lets a CPU
vectorise over output channels). The layout changes every convolution kernel, so records are
keyed by it too (:func:`transtune.library.target_key`), and so is the choice to *prepack*
weights: let MetaSchedule tile each kernel's weights for its schedule (their repacking is
folded into the constants when the model is compiled). With *fast math*
(:mod:`transtune.fastmath`), transcendentals are computed by vectorisable approximations, and
with *Winograd* (:mod:`transtune.winograd`) stride-1 3x3 convolutions by Winograd's minimal
filtering; the kernels they change are other workloads, so they need no key of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import TargetError
from .machine import HostInfo, fingerprint, hardware_id, host_info, norm_feature

# LLVM feature names that are ISA extensions (what a CPU must execute), as opposed to tuning
# flags such as "fast-gather" or "slow-3ops-lea". Compared with /proc/cpuinfo after
# normalisation (lower case, '.', '_' and '-' removed).
_ISA_PREFIXES = ("sse", "ssse", "avx", "amx", "fma", "f16c", "bmi", "sha", "aes", "vaes", "gfni")

# Restricted ISA levels of an x86 host: LLVM CPU names whose feature sets every x86-64-v4 host
# (and Zen 4) has.
_ISA_LEVELS = {"avx2": "haswell", "sse4.2": "nehalem"}

# Data layouts convolutions can be lowered in, with the weight layout each pairs with.
LAYOUTS = {"NCHW": "OIHW", "NHWC": "HWIO"}
DEFAULT_LAYOUT = "NCHW"


@dataclass(frozen=True)
class TargetConfig:
    """A named way to compile for and run on a device: TVM target dict, thread count and the
    data layout convolutions are lowered in.

    ``name`` is the hardware id, ``alias`` the machine-relative name (``host-1core``), and
    ``fingerprint`` what the id stands for (:func:`transtune.machine.fingerprint`)."""

    name: str
    target: dict[str, Any]
    num_threads: int
    description: str
    alias: str = ""
    fingerprint: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    layout: str = DEFAULT_LAYOUT
    prepack: bool = False  # weights repacked into the layout each kernel's schedule wants
    fast_math: bool = False  # exp, erf, tanh... by TVM's approximations (transtune.fastmath)
    winograd: bool = False  # 3x3 convolutions as Winograd's F(4x4, 3x3) (transtune.winograd)

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


def foreign_cpu(spec: dict[str, Any], cpu: dict) -> str | None:
    """Why records of the CPU target ``spec`` cannot have been measured on ``cpu`` (a
    full-ISA target built for another LLVM CPU), or None if they can (migrations ask)."""
    mcpu = spec.get("mcpu")
    if mcpu and mcpu not in _ISA_LEVELS.values() and mcpu != cpu.get("host_mcpu"):
        return (
            f"a target was built for {mcpu!r}, but the CPU given is a {cpu.get('host_mcpu')!r} "
            f"({cpu.get('model_name')}); migrate it on that CPU or pass its description "
            "(`transtune targets --json` there) with --cpu"
        )
    return None


def hardware_name(name: str) -> str:
    """The hardware id ``name`` stands for: an alias of this host (``host-1core``) resolves to
    its id; anything else is taken as an id (of this machine or another)."""
    config = host_configs().get(name)
    return config.name if config else name


def host_configs() -> dict[str, TargetConfig]:
    """The target configurations of this host, by alias."""
    host = host_info()
    variants = [("host", host.mcpu, None, host.cores), ("host-1core", host.mcpu, None, 1)]
    if host.arch in ("x86_64", "AMD64"):
        for level, mcpu in _ISA_LEVELS.items():
            variants += [(f"host-{level}", mcpu, level, host.cores),
                         (f"host-{level}-1core", mcpu, level, 1)]  # fmt: skip
    return {alias: _config(host, alias, mcpu, level, cores)
            for alias, mcpu, level, cores in variants}  # fmt: skip


def _config(host: HostInfo, alias: str, mcpu: str, level: str | None, cores: int) -> TargetConfig:
    threads = "1 thread" if cores == 1 else f"{cores} cores"
    isa = f"code restricted to {level.upper()} (-mcpu={mcpu})" if level else f"full ISA ({mcpu})"
    spec = {"kind": "llvm", "mcpu": mcpu, "num-cores": cores}
    hw_id, fp = hardware_for(host.cpu(), spec)
    return TargetConfig(hw_id, spec, cores, f"{host.cpu_model}, {isa}, {threads}", alias, fp)


def hardware_for(cpu: dict, spec: dict[str, Any]) -> tuple[str, dict]:
    """(hardware id, fingerprint) of the CPU target ``spec`` run on the CPU ``cpu``
    (:meth:`transtune.machine.HostInfo.cpu`): a restricted ISA level is named by the level
    (``-avx2``), another LLVM CPU by its name, extra ``mattr`` features by themselves."""
    mcpu = str(spec.get("mcpu") or cpu["host_mcpu"])
    threads = int(spec.get("num-cores", 1))
    level = next((lv for lv, name in _ISA_LEVELS.items() if name == mcpu), None)
    fp = fingerprint(cpu, mcpu, threads)
    if spec.get("mattr"):  # extra or removed features are part of what the code is
        fp["mattr"] = [str(a) for a in spec["mattr"]]
        level = (level or mcpu) + "".join(fp["mattr"])
    return hardware_id(cpu, mcpu, threads, level), fp


def get_config(
    name: str | None = None,
    layout: str | None = None,
    prepack: bool = False,
    fast_math: bool = False,
    winograd: bool = False,
) -> TargetConfig:
    """A target configuration by name (default ``host``), or a custom one from a JSON target
    dict such as ``'{"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 2}'``, lowering
    convolutions in ``layout`` (default ``NCHW``; see :data:`LAYOUTS`), with weights repacked
    for each kernel's schedule when ``prepack``, transcendentals approximated when
    ``fast_math``, stride-1 3x3 convolutions computed as Winograd's when ``winograd`` (NHWC
    only).

    Raises ``TargetError`` for an unknown name or layout, or a target this host cannot run.
    """
    layout = (layout or DEFAULT_LAYOUT).upper()
    if layout not in LAYOUTS:
        raise TargetError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    configs = host_configs()
    by_id = {c.name: c for c in configs.values()}
    name = name or "host"
    if name.lstrip().startswith("{"):
        try:
            spec = json.loads(name)
        except json.JSONDecodeError as err:
            raise TargetError(f"target is neither a configuration name nor JSON: {err}") from None
        make_target(spec)
        config = _custom(spec, name)
    elif name in configs or name in by_id:
        config = configs.get(name) or by_id[name]
    else:
        known = ", ".join(f"{alias} ({c.name})" for alias, c in configs.items())
        raise TargetError(f"unknown target configuration {name!r} on this host; known: {known}")
    check_runnable(config.target)
    if winograd and layout != "NHWC":
        raise TargetError("Winograd convolutions need the NHWC layout (--layout NHWC)")
    options = {"layout": layout, "prepack": bool(prepack), "fast_math": bool(fast_math),
               "winograd": bool(winograd)}  # fmt: skip
    if all(getattr(config, k) == v for k, v in options.items()):
        return config
    return replace(config, **options)


def _custom(spec: dict[str, Any], text: str) -> TargetConfig:
    """A configuration from a JSON target dict; a CPU target is named by its hardware id."""
    host = host_info()
    spec = {"num-cores": host.cores, **spec}
    threads = int(spec["num-cores"])
    if spec.get("kind") != "llvm":
        return TargetConfig(spec["kind"], spec, threads, f"custom: {text}", spec["kind"])
    hw_id, fp = hardware_for(host.cpu(), spec)
    return TargetConfig(hw_id, spec, threads, f"custom: {text}", str(spec.get("mcpu", "")), fp)


def llvm_host_cpu() -> str:
    """The LLVM CPU name of this host (``znver4``), as TVM's LLVM detects it."""
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())


def cpu_features(target) -> set[str]:
    """The LLVM features code for a ``tvm.target.Target`` may use (``avx2``, ``fma``...)."""
    from tvm.target import codegen

    return {str(f) for f in codegen.llvm_get_cpu_features(target)}


def missing_isa(spec: dict[str, Any]) -> list[str]:
    """ISA extensions that code for ``spec`` may use but this host lacks (empty if runnable)."""
    if spec.get("kind") != "llvm":
        return []
    host = host_info()
    target = make_target(spec)
    wanted = {norm_feature(f) for f in cpu_features(target)}
    wanted = {f for f in wanted if f.startswith(_ISA_PREFIXES)}
    for attr in target.attrs.get("mattr", ()) or ():
        name = norm_feature(str(attr).lstrip("+-"))
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
