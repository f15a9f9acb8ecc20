#!/usr/bin/env bash
# The CPU figures of the foundation issue: tune the three workloads (200 trials each), then bench
# them against numpy in one run, and measure tuning throughput on matmul 512^3.
# Usage: bash scripts/cpu_figures.sh [DB] [OUTDIR]   (run on an otherwise idle machine)
set -euo pipefail
DB=${1:-bench/cpu_figures.db}; OUT=${2:-bench}
mkdir -p "$OUT" "$(dirname "$DB")"
T=${TRIALS:-200}
for spec in "matmul 1024,1024,1024" "dense_bias_relu 128,3072,768" "conv2d 1,64,56,56,64,3,3,1,1"; do
  set -- $spec
  python scripts/tune.py --op "$1" --shape "$2" --trials "$T" --db "$DB" --json --no-progress | tail -1 >> "$OUT/cpu_tune.jsonl"
done
python scripts/bench.py --target cpu --db "$DB" --json --repeat 7 --min-repeat-ms 300 | tee "$OUT/cpu_bench.txt"
tail -1 "$OUT/cpu_bench.txt" > "$OUT/cpu_bench.json"
rm -f "$OUT/throughput.db"*
python scripts/tune.py --op matmul --shape 512,512,512 --trials 100 --seed 11 --db "$OUT/throughput.db" --json \
  --no-progress | tail -1 > "$OUT/cpu_throughput.json"
rm -f "$OUT/throughput.db"*
