#!/bin/bash
# Replay sweep of ModelTuner options (xgb without transfer): one bench_search run per variant.
# usage: bash bench/search/seeds_and_tuner_options/sweep.sh REPLAY OUTDIR SEEDS JOBS NAME=JSON [NAME=JSON ...]
# (env FIRST_SEED, default 0; STRATEGY, default xgb; MAX_S, a time limit per variant, default 590)
set -u
replay=$1; out=$2; seeds=$3; jobs=$4; shift 4
mkdir -p "$out"
export OMP_NUM_THREADS=1
for spec in "$@"; do
  name=${spec%%=*}; opts=${spec#*=}
  start=$(date +%s)
  timeout "${MAX_S:-590}" python3 scripts/bench_search.py --replay "$replay" --seeds "$seeds" \
    --first-seed "${FIRST_SEED:-0}" --strategies "${STRATEGY:-xgb}" --jobs "$jobs" \
    --tuner-options "$opts" --quiet --png /tmp/sweep.png --json "$out/$name.json" > "$out/$name.txt" 2>&1
  echo "$name $(grep -E '^overall' "$out/$name.txt") ($(( $(date +%s) - start )) s) $opts"
done
