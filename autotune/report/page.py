"""The report as one self-contained HTML page: inline CSS and SVG, no scripts, no external assets."""

from __future__ import annotations

import json
import math
import time
from html import escape
from typing import Any, Iterable

from .collect import ModelCurve, Report, TaskCurve
from .svg import Chart, render

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1000px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 15px; margin: 24px 0 4px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #ddd; padding: 3px 8px;
  text-align: left; vertical-align: top; } th { background: #f4f6f8; } td.num { text-align: right; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 8px; overflow-x: auto; font-size: 12px;
  max-height: 420px; } .muted { color: #666; } .chart text { font-size: 11px; fill: #333; }
.chart .tick { fill: #666; } section.task { margin-bottom: 28px; }
"""


def _ms(s: float | None) -> str:
    return "-" if s is None or math.isinf(s) else f"{s * 1e3:.4g} ms"


def _table(head: Iterable[str], rows: Iterable[Iterable[Any]], numeric: set[int] = frozenset()) -> str:
    h = "".join(f"<th>{escape(str(c))}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{escape(str(c))}</td>'
                         for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _provenance(report: Report) -> str:
    out = ["<h2 id=target>Target provenance</h2>",
           "<p class=muted>Where the measurements were taken: the machine's fingerprint, as the database "
           "stores it (its key is a hash of it).</p>"]
    for t in report.provenance:
        fp = t["fingerprint"]
        rows = [("kind", t["kind"]), ("key", t["key"])]
        rows += [(k, ", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in sorted(fp.items())]
        rows += [("measurements", t["measurements"]), ("first measured", _when(t["first"])),
                 ("last measured", _when(t["last"]))]
        out.append(f"<h3>{escape(t['name'])}</h3>" + _table(("field", "value"), rows))
    if not report.provenance:
        out.append("<p>No target: the database holds no measurements.</p>")
    return "\n".join(out)


def _errors(report: Report) -> str:
    out = ["<h2 id=errors>Errors by kind</h2>"]
    kinds = report.summary.errors_by_kind
    if not kinds:
        return out[0] + "<p>No failed measurement.</p>"
    out.append("<p class=muted>Failed trials are kept in the database (a config that failed is never "
               "measured again); each kind with the tasks it hit and one message.</p>")
    rows = []
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        hit = [(t.pair.workload, len(t.errors[kind]), t.errors[kind][0])
               for t in report.tasks if kind in t.errors]
        rows.append((kind, n, "; ".join(f"{w}: {c}" for w, c, _ in hit), hit[0][2] if hit else ""))
    out.append(_table(("kind", "count", "tasks", "example message"), rows, {1}))
    return "\n".join(out)


def _model(m: ModelCurve) -> str:
    chart = Chart(f"{m.name}: estimated latency against trials", points=(), line=m.estimates,
                  reference=None if math.isinf(m.final_s) else m.final_s,
                  reference_label=f"compile's choice: {_ms(m.final_s)}",
                  x_label="trials of the model's tasks, in the order measured",
                  line_label="estimated latency")
    rows = [(t["label"], t["calls"], t["trials"], _ms(t["chosen_s"]),
             _ms(t["chosen_s"] * t["calls"]) if t["chosen_s"] else "-") for t in m.tasks]
    return "\n".join([
        f"<h2 id=model>Model {escape(m.name)}</h2>",
        f"<p>{escape(m.description)}. Estimated latency (the sum over its tasks of calls x kernel time) "
        f"by the records compile takes: <b>{_ms(m.final_s)}</b>. The curve: the same sum with each task's "
        "fastest run so far, after each trial of any of its tasks (it starts once every task has a valid "
        "measurement).</p>",
        render(chart),
        _table(("task", "calls per run", "trials", "chosen kernel", "calls x kernel"), rows, {1, 2, 3, 4}),
    ])


def _task(i: int, t: TaskCurve) -> str:
    p = t.pair
    chosen = t.chosen
    ref_label = (f"compile's choice: {_ms(chosen.mean_s)} (median of {p.best_runs} run(s))"
                 if chosen else "")
    chart = Chart(f"{p.workload} on {p.target}: tuning curve", points=t.times, line=t.best_so_far,
                  reference=chosen.mean_s if chosen else None, reference_label=ref_label)
    facts = (f"{p.trials} trials ({p.valid} valid, {p.errors} failed), {p.confirmations} confirmation "
             f"re-measurements; chosen: {_ms(chosen.mean_s if chosen else None)}"
             + (f", {p.best_gflops:.1f} GFLOP/s" if p.best_gflops else ""))
    config = json.dumps(chosen.config, sort_keys=True) if chosen else "-"
    return "\n".join([
        f"<section class=task id=task{i}><h3>{escape(p.workload)} <span class=muted>on "
        f"{escape(p.target)}</span></h3>",
        f"<p>{escape(facts)}</p>",
        render(chart),
        f"<p class=muted>Dots: each trial's time; crosses: failed trials; line: the fastest run so far; "
        f"dashed: the record compile takes (each config ranked by the median of its runs).</p>"
        f"<p>Chosen config: <code>{escape(config)}</code></p>",
        f"<details open><summary>Chosen schedule as a loop nest</summary><pre>{escape(t.loop_nest)}</pre>"
        "</details></section>",
    ])


def render_page(report: Report) -> str:
    s = report.summary
    trials = sum(p.trials for p in s.pairs)
    toc = "".join(f'<li><a href="#task{i}">{escape(t.pair.workload)}</a> <span class=muted>'
                  f'{escape(t.pair.target)}</span></li>' for i, t in enumerate(report.tasks))
    body = [
        f"<h1>Tuning report: {escape(report.db_path)}</h1>",
        f"<p class=muted>autotune {escape(report.version)}, generated {escape(report.generated)}; "
        f"schema {escape(str(s.schema_version))}; {len(s.targets)} target(s), {s.workloads} workload(s), "
        f"{s.measurements} measurements ({trials} trials).</p>",
    ]
    body += [_model(m) for m in report.models]
    body += [f"<h2 id=tasks>Tasks ({len(report.tasks)})</h2><ul>{toc}</ul>"]
    body += [_task(i, t) for i, t in enumerate(report.tasks)]
    body += [_errors(report), _provenance(report)]
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>autotune report: {escape(report.db_path)}</title><style>{CSS}</style></head>"
            f"<body>\n" + "\n".join(body) + "\n</body></html>\n")
