"""Views that carry names (a workload's label, a target's hardware), so the database reads well in the
plain ``sqlite-utils`` CLI and in Datasette; the ranking rule compile uses (``PER_CONFIG``); and the
descriptions of every table and view, as Datasette ``metadata``."""

from __future__ import annotations

from typing import Any

from .record import CONFIRM_LABEL

# error kinds that say a kernel computes wrong or crashes (autotune/measure/errors.py), not that the
# machine or the compiler failed it once
UNTRUSTED_ERRORS = ("wrong_answer", "runtime_crash")

# One row per verified, error-free config of each (workload, target) pair: its upper-median record
# (rn_ = n_ // 2 + 1 of its n_ records ordered by time), with conf_ its confirmation records and
# unconfirmed_ 1 where other configs of the pair have more confirmations. A config measured more
# than once (tuning re-measures its finalists: autotune/search/confirm.py) is ranked by that median,
# so one lucky run does not make it the best; finalists with their confirmations rank before every
# other config (a run killed while confirming leaves configs that never beat them). Ranked by
# (unconfirmed_, mean_s, id), the first row is the record compile takes. A config with a wrong
# answer or a crash in any of its records has no row, however many of its runs passed: a kernel
# that fails one run in several (a race) is not compiled. ``{where}``: extra conditions ending in
# AND, or "".
PER_CONFIG = """SELECT c.*, (conf_ < MAX(conf_) OVER (PARTITION BY workload_key, target_key))
                   AS unconfirmed_
        FROM (
            SELECT r.*, COALESCE(k.n, 0) AS conf_ FROM (
                SELECT m.*, ROW_NUMBER() OVER (
                           PARTITION BY workload_key, target_key, config_key ORDER BY mean_s, id) AS rn_,
                       COUNT(*) OVER (PARTITION BY workload_key, target_key, config_key) AS n_
                FROM measurements AS m
                WHERE {where} error_kind IS NULL AND verified = 1 AND mean_s IS NOT NULL
                  AND NOT EXISTS (
                      SELECT 1 FROM measurements AS bad
                      WHERE bad.workload_key = m.workload_key AND bad.target_key = m.target_key
                        AND bad.config_key = m.config_key
                        AND bad.error_kind IN ('""" + "', '".join(UNTRUSTED_ERRORS) + """'))
            ) AS r LEFT JOIN (
                SELECT workload_key, target_key, config_key, COUNT(*) AS n FROM measurements
                WHERE {where} tuner = '""" + CONFIRM_LABEL + """'
                GROUP BY workload_key, target_key, config_key
            ) AS k USING (workload_key, target_key, config_key)
            WHERE r.rn_ = r.n_ / 2 + 1
        ) AS c"""

# a target's readable name: its kind and hardware (a damaged fingerprint reads as '?')
_TARGET_NAME = """kind || ' ' || COALESCE(CASE WHEN json_valid(fingerprint) THEN
    COALESCE(json_extract(fingerprint, '$.model'), json_extract(fingerprint, '$.name')) END, '?')"""

NAMED_VIEWS: dict[str, str] = {
    "target_names": f"""CREATE VIEW IF NOT EXISTS target_names AS
        SELECT key AS target_key, kind, {_TARGET_NAME} AS target, fingerprint FROM targets""",
    "measurements_named": """CREATE VIEW IF NOT EXISTS measurements_named AS
        SELECT m.id, w.name AS workload, t.target, m.tuner, m.mean_s * 1e3 AS ms,
               CASE WHEN m.mean_s > 0 THEN w.flops / m.mean_s / 1e9 END AS gflops,
               m.error_kind, m.error_msg, m.config, m.created_at, m.workload_key, m.target_key
        FROM measurements AS m
        LEFT JOIN workloads AS w ON w.key = m.workload_key
        LEFT JOIN target_names AS t ON t.target_key = m.target_key""",
    "best_configs": f"""CREATE VIEW IF NOT EXISTS best_configs AS
        SELECT w.name AS workload, t.target, b.mean_s * 1e3 AS ms,
               CASE WHEN b.mean_s > 0 THEN w.flops / b.mean_s / 1e9 END AS gflops,
               b.n_ AS runs, b.conf_ AS confirmations, b.config, b.id AS measurement_id,
               b.workload_key, b.target_key
        FROM (
            SELECT p.*, ROW_NUMBER() OVER (
                PARTITION BY workload_key, target_key ORDER BY unconfirmed_, mean_s, id) AS rank_
            FROM ({PER_CONFIG.format(where="")}) AS p
        ) AS b
        LEFT JOIN workloads AS w ON w.key = b.workload_key
        LEFT JOIN target_names AS t ON t.target_key = b.target_key
        WHERE b.rank_ = 1""",
    "tuning_counts": f"""CREATE VIEW IF NOT EXISTS tuning_counts AS
        SELECT w.name AS workload, t.target,
               SUM(m.tuner != '{CONFIRM_LABEL}') AS trials,
               SUM(m.tuner != '{CONFIRM_LABEL}' AND m.error_kind IS NULL) AS valid,
               SUM(m.error_kind IS NOT NULL) AS errors,
               SUM(m.tuner = '{CONFIRM_LABEL}') AS confirmations,
               m.workload_key, m.target_key
        FROM measurements AS m
        LEFT JOIN workloads AS w ON w.key = m.workload_key
        LEFT JOIN target_names AS t ON t.target_key = m.target_key
        GROUP BY m.workload_key, m.target_key""",
    "errors_by_kind": """CREATE VIEW IF NOT EXISTS errors_by_kind AS
        SELECT w.name AS workload, t.target, m.error_kind, COUNT(*) AS count,
               MIN(m.error_msg) AS example, m.workload_key, m.target_key
        FROM measurements AS m
        LEFT JOIN workloads AS w ON w.key = m.workload_key
        LEFT JOIN target_names AS t ON t.target_key = m.target_key
        WHERE m.error_kind IS NOT NULL
        GROUP BY m.workload_key, m.target_key, m.error_kind""",
}

DESCRIPTIONS: dict[str, str] = {
    "meta": "The file's application id and schema version.",
    "workloads": "Each tuned computation: name (op and shape), description (JSON that rebuilds it), FLOPs; "
    "key is its structural hash.",
    "targets": "Each machine kernels were measured on: kind (cpu, cuda) and fingerprint (hardware, ISA, "
    "compiler or driver); key is a hash of it.",
    "measurements": "Every measured schedule: config (knob values), steps (the replayable schedule), costs "
    "(seconds per run), mean_s, or error_kind and error_msg when it failed. tuner 'confirm' marks a "
    "re-measurement of a finalist.",
    "claims": "Configs a live tuner is measuring now (tuners sharing a database skip them).",
    "quarantine": "Rows that could not be read, moved aside by `autotune db repair` with every column kept.",
    "module_picks": "The record each task of a compiled model takes, chosen by timing its best records "
    "inside that model at the end of `tune.py --model`; compile takes a pick while best_config_key is "
    "still the task's best.",
    "best_measurements": "The fastest single record of each workload and target (compile ranks by the "
    "median instead: see best_configs).",
    "target_names": "Each target with a readable name: kind and hardware.",
    "measurements_named": "Every measurement with its workload's and target's names, time in ms and "
    "GFLOP/s.",
    "best_configs": "The schedule compile takes for each workload and target: each config ranked by the "
    "median of its runs, confirmed finalists first.",
    "tuning_counts": "Trials, valid and failed measurements and confirmations per workload and target.",
    "errors_by_kind": "Failed measurements per workload, target and kind of error, with one example "
    "message.",
}


def datasette_metadata(database: str, title: str = "autotune tuning database") -> dict[str, Any]:
    """Datasette's ``metadata`` for a tuning database served under the name ``database`` (the file's
    stem): a description of every table and view."""
    return {
        "title": title,
        "description": "Measurements of generated kernels: every schedule tried, its time or its error.",
        "databases": {
            database: {"tables": {name: {"description": text} for name, text in DESCRIPTIONS.items()}}
        },
    }
