#!/usr/bin/env python
"""ONNX's node tests through the compiler: figures, and the expected-rejections list.

    python scripts/conformance.py                       # figures (every test, all cores)
    python scripts/conformance.py --json                # the figures as one JSON object on stdout
    python scripts/conformance.py --out bench/conformance/node_tests.json   # figures + every outcome
    python scripts/conformance.py --write-rejections    # rewrite tests/data/onnx_node_rejections.txt
    python scripts/conformance.py --op Max --list       # one operator's tests, one line each

Each test passes, is rejected by the frontend with a reason, gives a WRONG answer or ends in a
TRACEBACK (autotune/graph/conformance.py says how). The figures: operator types supported (of ONNX's
default domain), the listed operators' tests by outcome, their float32 pass rate, and wrong answers
and tracebacks across every test. Exit status 1 when any test departs from the rules (a wrong answer
or traceback anywhere, or a listed operator's test that disagrees with the rejections list), 2 on
bad arguments.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.cli.common import ArgParser, int_in  # noqa: E402
from autotune.graph import conformance as cf  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = ArgParser(prog="conformance.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--op", action="append", default=[], help="only this operator's tests (repeatable)")
    p.add_argument("--workers", type=int_in(1), default=None, help="worker processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--out", type=Path, help="write the figures and every outcome to this JSON file")
    p.add_argument("--list", action="store_true", help="print every test's outcome")
    p.add_argument("--write-rejections", action="store_true",
                   help=f"rewrite {cf.REJECTIONS_PATH.relative_to(cf.REJECTIONS_PATH.parents[2])}")
    p.add_argument("--cache-dir", help="where built modules are kept (default: a fresh temporary folder)")
    args = p.parse_args(argv)
    if args.write_rejections and args.op:
        p.error("--write-rejections needs every test: leave out --op")
    tests = list(cf.node_tests())
    if args.op:
        known = {t.op for t in tests}
        unknown = [op for op in args.op if op not in known]
        if unknown:
            p.error(f"no node tests for operator {', '.join(unknown)}")
        tests = [t for t in tests if t.op in args.op]

    def show(o: cf.Outcome) -> None:
        print(f"{o.status.upper():9} {o.name}  {o.detail}", file=sys.stderr if args.json else sys.stdout,
              flush=True)

    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        suite = cf.run_suite(tests, workers=args.workers, cache_dir=args.cache_dir or tmp,
                             progress=show if args.list else None)
    fig = cf.figures(suite)
    if args.write_rejections:
        rows = cf.write_rejections(suite.outcomes)
        bad = sum(not r.justification for r in rows)
        print(f"wrote {len(rows)} expected rejections to {cf.REJECTIONS_PATH}"
              + (f"; {bad} UNJUSTIFIED (add rules to JUSTIFICATIONS)" if bad else ""), file=sys.stderr)
    expected = cf.read_rejections()
    if args.op:
        ran = {t.name for t in tests}
        expected = {n: r for n, r in expected.items() if n in ran}
    problems = cf.wrong_or_traceback(suite) + cf.rejection_list_drift(suite, expected)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        head = json.dumps(fig, indent=1)[:-2]  # the figures, then one outcome a line
        rows = ",\n".join("  " + json.dumps(o.to_json()) for o in suite.outcomes)
        args.out.write_text(f'{head},\n "outcomes": [\n{rows}\n ]\n}}\n')
    if args.json:
        print(json.dumps({k: v for k, v in fig.items() if k not in ("per_op", "supported_ops")}))
    else:
        n = fig["listed"]
        print(f"operator types supported: {fig['ops_supported']} of {fig['ops_default_domain']} "
              "(ONNX default domain)")
        print(f"node tests of listed operators: {fig['listed_tests']}: pass {n['pass']}, rejected "
              f"{n['rejected']}, wrong {n['wrong']}, traceback {n['traceback']}")
        rate = fig["float32_pass_rate"]
        print(f"float32 tests of listed operators: {fig['float32_pass']} of {fig['float32_tests']} pass"
              + (f" ({100 * rate:.1f}%)" if rate is not None else ""))
        for v, c in fig["variants"].items():
            print(f"  their :{v} variants: pass {c['pass']}, rejected {c['rejected']}, wrong {c['wrong']}, "
                  f"traceback {c['traceback']}")
        a = fig["all"]
        print(f"all {fig['all_tests']} tests and variants: pass {a['pass']}, rejected {a['rejected']}, wrong "
              f"{a['wrong']}, traceback {a['traceback']} ({fig['seconds']:.0f} s)")
    for line in problems:
        print("problem: " + line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
