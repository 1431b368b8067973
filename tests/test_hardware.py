"""Hardware identity: ids derived from the CPU, aliases, refusal to mix CPUs, migration."""

import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transtune.dataset import DatasetStore
from transtune.dataset.migrate import migrate_dataset
from transtune.dataset.store import DatasetError
from transtune.library import LibraryError, open_library
from transtune.library.migrate import migrate_library
from transtune.library.schema import SCHEMA
from transtune.machine import cpu_of, cpu_short_name, fingerprint, hardware_id, host_info
from transtune.targets import get_config, hardware_for, hardware_name, host_configs

ZEN3 = {
    "vendor": "AuthenticAMD", "model_name": "AMD EPYC 7B13 64-Core Processor", "family": "25",
    "model": "1", "stepping": "0", "host_mcpu": "znver3", "l1d_kib": 32.0, "l2_kib": 512.0,
    "l3_kib": 32768.0,
}  # fmt: skip
OTHER = {**ZEN3, "host_mcpu": "not-this-cpu"}  # a CPU no test machine is


def test_ids_are_derived_from_the_cpu():
    assert cpu_short_name("AMD EPYC") == "epyc"
    assert cpu_short_name("AMD EPYC 7B13 64-Core Processor") == "epyc"
    assert cpu_short_name("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz") == "xeon"
    assert cpu_short_name("AMD Ryzen 9 7950X 16-Core Processor") == "ryzen"
    assert cpu_short_name("", "GenuineIntel") == "intel"
    assert hardware_id(ZEN3, "znver3", 2) == "epyc-znver3-2c"
    assert cpu_of(hardware_id(ZEN3, "haswell", 1, "avx2")) == cpu_of("epyc-znver3-2c")
    assert hardware_for(ZEN3, {"kind": "llvm", "mcpu": "haswell", "num-cores": 1})[0] == (
        "epyc-znver3-1c-avx2"
    )
    spec = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2, "mattr": ["-avx2"]}
    hw_id, fp = hardware_for(ZEN3, spec)
    assert hw_id == "epyc-znver3-2c-znver3-avx2" and fp["mattr"] == ["-avx2"]
    # Another stepping or cache size is another fingerprint under the same readable id.
    assert fingerprint(ZEN3, "znver3", 2) != fingerprint({**ZEN3, "stepping": "1"}, "znver3", 2)


def test_aliases_resolve_to_this_hosts_ids():
    host = host_info()
    configs = host_configs()
    full = configs["host"]
    assert full.name == hardware_id(host.cpu(), host.mcpu, host.cores)
    assert full.name.endswith(f"-{host.mcpu}-{host.cores}c") and full.alias == "host"
    assert configs["host-1core"].name.endswith(f"-{host.mcpu}-1c")
    assert get_config(full.name) == full and hardware_name("host") == full.name
    assert hardware_name("epyc-znver3-2c") == "epyc-znver3-2c"  # an id of another machine
    assert full.fingerprint["model_name"] == host.cpu_model
    assert full.fingerprint["family"] == host.family and full.fingerprint["threads"] == host.cores
    assert len({c.name for c in configs.values()}) == len(configs)  # one id per configuration


def test_library_refuses_an_id_stored_for_another_cpu(tmp_path):
    config = get_config("host-1core")
    url = tmp_path / "lib.db"
    with open_library(url) as lib:
        wid = lib.add_workload(_matmul(), "matmul")
        lib.add_record(wid, config, [[], []], [1e-3])
        (record,) = lib.records(wid, config)
        assert record.hardware == config.name and "hardware" not in record.as_json()[2]
        lib.add_record(wid, config.tvm_target(), [[], []], [2e-3])  # hardware unknown
        assert lib.count_records(wid, config) == 1
    other = json.dumps({**config.fingerprint, "model_name": "Another CPU"})
    with sqlite3.connect(url) as conn:
        conn.execute("UPDATE targets SET fingerprint = ? WHERE name = ?", (other, config.name))
    with open_library(url) as lib, pytest.raises(LibraryError, match="is another CPU"):
        lib.add_record(lib.find_workload(_matmul()), config, [[], []], [1e-3])
    with open_library(tmp_path / "b.db") as b:
        wid = b.add_workload(_matmul(), "matmul")
        b.add_record(wid, config, [[], []], [1e-3])
        with open_library(url) as a, pytest.raises(LibraryError, match="is another CPU"):
            b.merge(a)


def test_library_of_schema_1_is_migrated(tmp_path):
    host = host_info()
    url = tmp_path / "old.db"
    _schema_1_library(url, host.mcpu)
    with pytest.raises(LibraryError, match="library migrate"):
        open_library(url)
    with pytest.raises(LibraryError, match="the CPU given is a 'not-this-cpu'"):
        migrate_library(url, OTHER)
    renamed = migrate_library(url, host.cpu())
    config = get_config("host")
    assert renamed == {"host": config.name} and migrate_library(url, host.cpu()) == {}
    with open_library(url) as lib:
        (record,) = lib.records(target=config)
        assert record.run_id == f"tune:m:{config.name}" and record.hardware == config.name
        assert lib.curve(f"tune:m:{config.name}") == [(8, 1.0, 2e-3)]
        assert lib.info()["by_target"] == [(config.name, 1)]
        assert lib._query("SELECT run_id FROM runs") == [(f"tune:m:{config.name}",)]


def test_dataset_of_format_1_is_migrated(tmp_path):
    host = host_info()
    out = tmp_path / "old"
    _format_1_dataset(out, host.mcpu)
    with pytest.raises(DatasetError, match="dataset migrate"):
        DatasetStore(out)
    with pytest.raises(DatasetError, match="the CPU given is a 'not-this-cpu'"):
        migrate_dataset(out, OTHER)
    renamed = migrate_dataset(out, host.cpu())
    ids = {alias: get_config(alias).name for alias in ("host", "host-avx2-1core")}
    assert renamed == ids and migrate_dataset(out, host.cpu()) == {}
    store = DatasetStore(out)
    assert store.targets() == sorted(ids.values())
    assert store.meta["sampling"] == {"seed": 0, "target": get_config("host").target}
    hardware = store.hardware()
    for alias, hw_id in ids.items():
        assert hardware[hw_id]["fingerprint"] == get_config(alias).fingerprint
        assert hardware[hw_id]["config"] == alias
        assert store.check_hardware(hw_id, get_config(alias).fingerprint)
    assert len(store.read("records")) == 2


def _matmul():
    from test_library import matmul

    return matmul(8)


def _schema_1_library(path, mcpu: str) -> None:
    old_targets = (
        "CREATE TABLE IF NOT EXISTS targets (id INTEGER PRIMARY KEY, "
        "key TEXT NOT NULL UNIQUE, name TEXT)"
    )
    schema = SCHEMA
    start = schema.index("CREATE TABLE IF NOT EXISTS targets")
    schema = schema[:start] + old_targets + schema[schema.index(";", start) :]
    key = json.dumps({"keys": ["cpu"], "kind": "llvm", "mcpu": mcpu, "num-cores": 2, "tag": ""},
                     sort_keys=True, separators=(",", ":"))  # fmt: skip
    with sqlite3.connect(path) as conn:
        conn.executescript(schema)
        conn.executescript(
            "INSERT INTO schema_version VALUES (1);"
            "INSERT INTO meta VALUES ('tvm_version', '0.27.0'), ('created', '0');"
            "INSERT INTO workloads VALUES (1, 's', x'00', 'matmul', 1.0);"
        )
        conn.execute("INSERT INTO targets VALUES (1, ?, 'host')", (key,))
        conn.execute("INSERT INTO runs VALUES ('tune:m:host', 'tune', 'm', ?, '{}', 0, 1)", (key,))
        conn.execute("INSERT INTO curve VALUES ('tune:m:host', 8, 1.0, 2e-3)")
        conn.execute(
            "INSERT INTO records VALUES (1, 1, 1, '[[], []]', 'null', '[0.002]', 0.002, "
            "'tuned', NULL, 'tune:m:host', '0.27.0', 0)"
        )


def _format_1_dataset(out, mcpu: str) -> None:
    from transtune.dataset.store import SCHEMAS

    out.mkdir()
    evaluator = {"number": 1, "repeat": 3, "min_repeat_ms": 20, "cache_flush": False}
    (out / "dataset.json").write_text(json.dumps({"format": 1, "evaluator": evaluator, "seed": 0}))
    rows = []
    for alias, target in (
        ("host", {"kind": "llvm", "mcpu": mcpu, "num-cores": host_info().cores}),
        ("host-avx2-1core", {"kind": "llvm", "mcpu": "haswell", "num-cores": 1}),
    ):
        old = {"id": f"{alias}@vm", "config": alias, "machine": "vm", "kind": "cpu",
               "device": "AMD EPYC", "threads": target["num-cores"], "isa": "avx2",
               "simd_bits": 256, "clock_ghz": 2.6, "l1d_kib": 32.0, "l2_kib": 1024.0,
               "l3_kib": 32768.0, "measured_bandwidth_gbs": 30.0,
               "measured_peak_gflops": 90.0}  # fmt: skip
        rows.append({"id": old["id"], "config": alias, "target": json.dumps(target),
                     "descriptor": json.dumps(old)})  # fmt: skip
        folder = out / "records" / f"target={alias}"
        folder.mkdir(parents=True)
        record = {"workload": "w", "sample": 0, "space": 0, "decisions": "[]",
                  "run_secs": [1e-3], "mean_secs": 1e-3, "status": "ok", "error": None,
                  "collected": 0.0}  # fmt: skip
        pq.write_table(
            pa.Table.from_pylist([record], SCHEMAS["records"]), folder / "part-1.parquet"
        )
    (out / "hardware").mkdir()
    pq.write_table(
        pa.Table.from_pylist(rows, SCHEMAS["hardware"]), out / "hardware" / "part-1.parquet"
    )
