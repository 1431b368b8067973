"""The schedule library's tables (one SQL text that SQLite and PostgreSQL both take, through
:mod:`.backend`'s small translation) and its constants."""

SCHEMA_VERSION = 2  # 2: targets keyed by hardware id, with the fingerprint behind it
PROVENANCES = ("tuned", "transferred", "sampled", "imported")
FAILED_SECONDS = 1e10  # MetaSchedule's run time for a candidate that failed to build or run

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (
    id INTEGER PRIMARY KEY,
    shash TEXT NOT NULL,
    mod_json BLOB NOT NULL,          -- zlib(JSON of MetaSchedule's Workload.as_json())
    kernel_class TEXT,
    flops REAL
);
CREATE INDEX IF NOT EXISTS workloads_shash ON workloads (shash);
CREATE TABLE IF NOT EXISTS workload_models (
    workload_id INTEGER NOT NULL REFERENCES workloads (id),
    model TEXT NOT NULL,
    kernel_name TEXT,
    weight INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (workload_id, model)
);
CREATE TABLE IF NOT EXISTS targets (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,        -- canonical JSON of the target and its "hardware" id
    name TEXT,                       -- the hardware id, when known
    fingerprint TEXT                 -- JSON: what the hardware id stands for
);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload_id INTEGER NOT NULL REFERENCES workloads (id),
    target_id INTEGER NOT NULL REFERENCES targets (id),
    trace TEXT NOT NULL,             -- JSON of the schedule trace
    args_info TEXT,                  -- JSON of the argument info
    run_secs TEXT NOT NULL,          -- JSON list of measured seconds
    mean_secs REAL NOT NULL,         -- mean of run_secs, 1e10 for a failed candidate
    provenance TEXT NOT NULL,
    donor TEXT,                      -- for transferred records: where the schedule came from
    run_id TEXT,
    tvm_version TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_best ON records (workload_id, target_id, mean_secs);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT,
    target TEXT,
    params TEXT,
    started REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS curve (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    trials INTEGER NOT NULL,
    seconds REAL NOT NULL,           -- wall time since the run (or its first session) started
    latency REAL NOT NULL            -- estimated end-to-end latency: sum weight x best kernel
);
CREATE TABLE IF NOT EXISTS kernel_curve (  -- added in place to version 2: old readers ignore it
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    workload_id INTEGER NOT NULL REFERENCES workloads (id),
    trials INTEGER NOT NULL,         -- candidates of this kernel measured so far (all runs)
    best REAL NOT NULL               -- its best mean seconds so far
);
"""


# Insert a record unless the same (workload, target, trace, run times) is stored: imports and
# merges are idempotent.
INSERT_NEW = (
    "INSERT INTO records (workload_id, target_id, trace, args_info, run_secs, mean_secs, "
    "provenance, donor, run_id, tvm_version, created) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM records "
    "WHERE workload_id = ? AND target_id = ? AND trace = ? AND run_secs = ?)"
)
