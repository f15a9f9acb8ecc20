#!/bin/sh
# Untuned latency: each model compiled with an empty tuning database (a fresh one in a temporary
# directory, removed afterwards; bench.py opens it read-only), so every task takes its rule-based
# default schedule, timed against onnxruntime in the same run (scripts/bench.py --model). One JSON
# line per model on stdout, with the 1-minute load average before the run (the machine is shared:
# a two-thread ratio means little under load; see single_thread.py).
# Usage, from the repository root: sh bench/graph/untuned/run.sh [zoo:MODEL ...] >> figures.jsonl
set -e
[ $# -gt 0 ] || set -- zoo:resnet18 zoo:bert_layer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -c "import sys; from records import TuningDatabase; TuningDatabase(sys.argv[1]).close()" "$tmp/empty.db"
for model in "$@"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    python scripts/bench.py --model "$model" --db "$tmp/empty.db" --repeat 5 --json | tail -n 1 |
        python -c "import json, sys; r = json.load(sys.stdin); r['load_1min'] = $load; print(json.dumps(r))"
done
