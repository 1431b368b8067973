import os
import subprocess
import sys

import pytest

from transtune.errors import TargetError
from transtune.targets import check_runnable, get_config, host_configs, host_info, missing_isa


def test_host_is_detected():
    host = host_info()
    assert host.cores >= 1
    assert host.mcpu and host.mcpu != "generic"


def test_configurations_build_targets_in_dict_form():
    configs = host_configs()
    assert {"host", "host-1core"} <= set(configs)
    host = configs["host"]
    target = host.tvm_target()
    assert target.kind.name == "llvm"
    assert int(target.attrs["num-cores"]) == host_info().cores == host.num_threads
    assert configs["host-1core"].num_threads == 1
    for alias, config in configs.items():
        assert config.alias == alias and get_config(config.name) == config
        assert host_info().cpu_model in config.description
        assert missing_isa(config.target) == []


@pytest.mark.skipif(host_info().arch != "x86_64", reason="ISA levels are defined for x86-64")
def test_restricted_isa_levels_are_runnable_and_narrower():
    configs = host_configs()
    assert configs["host-avx2"].target["mcpu"] == "haswell"
    assert configs["host-sse4.2"].target["mcpu"] == "nehalem"
    get_config("host-sse4.2")  # does not raise


def test_unknown_configuration_names_the_known_ones():
    with pytest.raises(TargetError, match="known: host"):
        get_config("tpu-v9")


def test_target_this_host_cannot_run_is_rejected():
    # No x86 CPU has both Diamond Rapids' AMX/AVX10.2 and Zen 5's SSE4a.
    rejected = []
    for mcpu in ("diamondrapids", "znver5"):
        try:
            check_runnable({"kind": "llvm", "mcpu": mcpu})
        except TargetError as e:
            assert "does not have" in str(e)
            rejected.append(mcpu)
    assert rejected


def test_unknown_target_kind_is_rejected():
    with pytest.raises(TargetError):
        check_runnable({"kind": "hexagon"})


def test_a_layout_is_part_of_the_configuration_and_of_the_record_key():
    from transtune.library import target_key

    nchw, nhwc = get_config("host"), get_config("host", "nhwc")
    assert nchw.layout == "NCHW" and nhwc.layout == "NHWC" and nchw != nhwc
    assert "layout" not in target_key(nchw)  # records keyed before layouts existed still match
    assert '"layout":"NHWC"' in target_key(nhwc)
    with pytest.raises(TargetError, match="unknown layout 'NCWH'; known: NCHW, NHWC"):
        get_config("host", "ncwh")


def test_importing_changes_no_environment_and_lowering_sizes_tvms_thread_pool():
    # A fresh process without the variables: importing transtune (and its cost models) sets
    # nothing; lowering a model sizes TVM's pool to every usable CPU (TVM's own default on
    # x86 is half of them), unpinned.
    script = """
import os
import torch
import transtune
import transtune.costmodel
assert "TVM_NUM_THREADS" not in os.environ and "TVM_BIND_THREADS" not in os.environ
from transtune.frontend import from_module
from transtune.machine import usable_cpus
model = from_module(torch.nn.Sequential(torch.nn.Linear(8, 8)), (torch.randn(1, 8),))
transtune.extract_kernels(model.mod, transtune.get_config("host"))
import tvm
assert os.environ["TVM_BIND_THREADS"] == "0"
assert tvm.runtime.num_threads() == usable_cpus(), tvm.runtime.num_threads()
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TVM_")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
