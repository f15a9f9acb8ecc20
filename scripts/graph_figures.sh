#!/usr/bin/env bash
# Whole-model figures: tune ResNet-18 (batch 1, 224x224) and a BERT-base layer (seq 128) in budget
# steps and benchmark the compiled model against onnxruntime after each step (same run, same inputs).
#
#   scripts/graph_figures.sh                     # budgets 500 2000 for both models (hours on 2 cores)
#   RESNET_BUDGETS="100 300" BERT_BUDGETS="100" scripts/graph_figures.sh
#   STRATEGY=xgb OUT=figures scripts/graph_figures.sh
#   RERANK=3 scripts/graph_figures.sh            # benchmarks compile with bench.py --rerank 3
#   WINOGRAD=2 scripts/graph_figures.sh          # tune.py / bench.py --winograd 2 (3x3 convs)
#
# Budgets are cumulative (--trials tops the DB up), so a killed run resumes. Every step appends one
# JSON line per model to $OUT/figures.jsonl and the table at the end is printed from it. On a machine
# where other processes keep a core busy, OpenMP's active waiting makes every parallel region wait for
# a descheduled thread: run with OMP_WAIT_POLICY=passive there (both tuning and benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-graph_figures}
RESNET_BUDGETS=${RESNET_BUDGETS-"500 2000"}  # set it empty to skip the model
BERT_BUDGETS=${BERT_BUDGETS-"500 2000"}
STRATEGY=${STRATEGY:-random}
REPEAT=${REPEAT:-5}
RERANK=${RERANK:-1}
WINOGRAD=${WINOGRAD:-0}
mkdir -p "$OUT"

run() {  # model budget
  local model=$1 budget=$2 name=${1#zoo:}
  local db="$OUT/${name%%\?*}.db"
  echo "== $model: tuning to $budget trials ($STRATEGY) =="
  python scripts/tune.py --model "$model" --trials "$budget" --db "$db" --strategy "$STRATEGY" --winograd "$WINOGRAD" --json \
    | tee "$OUT/tune_${name%%\?*}_$budget.log" | tail -n 3 | sed -n 1,2p
  echo "== $model: benchmark after $budget trials =="
  python scripts/bench.py --model "$model" --db "$db" --repeat "$REPEAT" --rerank "$RERANK" --winograd "$WINOGRAD" --json \
    | tee "$OUT/bench_${name%%\?*}_$budget.log" | tail -n 2 | sed -n 1p
  tail -n 1 "$OUT/bench_${name%%\?*}_$budget.log" \
    | python -c "import json,sys; r=json.load(sys.stdin); r['budget']=$budget; print(json.dumps(r))" \
    >> "$OUT/figures.jsonl"
}

for b in $RESNET_BUDGETS; do run zoo:resnet18 "$b"; done
for b in $BERT_BUDGETS; do run zoo:bert_layer "$b"; done

python - "$OUT/figures.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"{'model':<12} {'trials':>6} {'ours ms':>9} {'ort ms':>8} {'speedup':>8} {'tuned':>7} {'arena MiB':>10} {'naive MiB':>10} {'max err':>9}")
for r in rows:
    n = r["tuned_subgraphs"] + r["fallback_subgraphs"]
    print(f"{r['model']:<12} {r['budget']:>6} {r['latency_s']*1e3:>9.2f} {r['baseline_latency_s']*1e3:>8.2f} "
          f"{r['speedup']:>7.2f}x {r['tuned_subgraphs']:>3}/{n:<3} {r['peak_arena_bytes']/2**20:>10.2f} "
          f"{r['naive_intermediate_bytes']/2**20:>10.2f} {r['max_abs_err']:>9.1e}")
EOF
