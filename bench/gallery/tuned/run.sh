#!/bin/sh
# Tune each named gallery model from an empty database (2000 trials), then time it against
# onnxruntime, one model at a time so no two runs share the cores; the files land beside this
# script (README.md). A model whose summary is already here is skipped: rerun after a kill.
#   sh bench/gallery/tuned/run.sh squeezenet1_1 bert_tiny ...
set -e
here=$(dirname "$0")
db_dir=${DB_DIR:-/tmp/gallery_tuned}
mkdir -p "$db_dir"
for m in "$@"; do
    onnx=bench/gallery/exports/$m.legacy.onnx
    [ -f "$onnx" ] || python -m bench.gallery --export-only --exporter legacy "$m"
    [ -f "$here/$m.legacy.tune.json" ] && continue
    start=$(date +%s)
    python scripts/tune.py --model "$onnx" --trials 2000 --db "$db_dir/$m.db" --json --no-progress \
        > "$db_dir/$m.tune.json"
    echo "$m: tuned in $(( $(date +%s) - start )) s"
    python scripts/bench.py --model "$onnx" --db "$db_dir/$m.db" --repeat 9 --json > "$here/$m.legacy.bench.json"
    python -c "import gzip, sys; from records import TuningDatabase as T; \
T(sys.argv[1]).export_jsonl(gzip.open(sys.argv[2], 'wt'))" "$db_dir/$m.db" "$here/$m.legacy.records.jsonl.gz"
    mv "$db_dir/$m.tune.json" "$here/$m.legacy.tune.json"
done
