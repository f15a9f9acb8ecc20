#!/usr/bin/env bash
# One device-machine session: install the carried wheels, run the GPU tests, tune, bench.
# Usage (on the GPU machine, repo root): bash scripts/gpu_session.sh PHASE
#   PHASE: smoke | tests | full | tune | bench | long (GPU tests + the 2000-trial matmul 1024^3 run)
#          | pipelined (a Dask scheduler and this host's GPU workers, then the 2000-trial matmul 1024^3 run
#            through --cluster; PIPE_S bounds it) | model (tune MODELS (default zoo:resnet18) on the GPU, bench each CUDA module vs PyTorch eager
#            and torch.compile in the same precision; PYTEST_S=0 skips its tests)
# Writes logs and JSON under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
DB=${DB:-$OUT/cuda.db}
# resume a carried DB, or seed from a committed export (bench/cuda/resnet18_module_and_ops/*_records.jsonl.gz)
if [ -n "${SEED_DB:-}" ] && [ ! -e "$DB" ]; then
  case "$SEED_DB" in
    *.jsonl.gz) python3 -c "import gzip, sys; from records import TuningDatabase as T; T(sys.argv[2]).import_jsonl(gzip.open(sys.argv[1], 'rt'))" "$SEED_DB" "$DB" ;;
    *) cp "$SEED_DB" "$DB" ;;
  esac
fi
phase=${1:-smoke}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv | tee "$OUT/gpu.txt"
python3 -c "from autotune.measure.cuda_device import query_device; import json; print(json.dumps(query_device()))" | tee "$OUT/device.json"
if [ "$phase" = smoke ]; then
  timeout 200 python3 -m pytest -q -x tests/test_cuda_measure.py tests/test_cuda_codegen.py tests/test_cuda_module.py tests/test_torch_baseline.py 2>&1 | tail -25 | tee "$OUT/pytest_gpu.txt"
  timeout 150 python3 scripts/tune.py --target cuda --op matmul --shape 1024,1024,1024 --trials 32 --db "$DB" --json --no-progress 2>&1 | tail -5
  timeout 60 python3 scripts/tune.py --target cuda --op softmax --shape 8192,8192 --trials 10 --db "$DB" --json --no-progress 2>&1 | tail -3
  timeout 60 python3 scripts/tune.py --target cuda --op add_relu_mul --shape 8192,8192 --trials 10 --db "$DB" --json --no-progress 2>&1 | tail -3
  timeout 100 python3 scripts/bench.py --target cuda --db "$DB" --json --repeat 5 --min-repeat-ms 20 2>&1 | tee "$OUT/bench_smoke.txt" | tail -12
fi
GPU_TESTS="tests/test_cuda_measure.py tests/test_cuda_codegen.py tests/test_cuda_module.py tests/test_torch_baseline.py
  tests/test_tensorcore.py tests/test_torch_frontend.py"
if [ "$phase" = full ] || [ "$phase" = tests ]; then
  # every test by name with its outcome (-rA), the whole log kept
  timeout ${PYTEST_S:-150} python3 -m pytest -v -rA -p no:cacheprovider $GPU_TESTS > "$OUT/pytest_gpu.txt" 2>&1
  tail -4 "$OUT/pytest_gpu.txt"
fi
if [ "$phase" = long ]; then
  timeout ${PYTEST_S:-100} python3 -m pytest -q tests/test_cuda_measure.py tests/test_cuda_codegen.py tests/test_cuda_module.py tests/test_torch_baseline.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
  # a kill by the timeout loses nothing: every trial is committed; a rerun tops up to 2000
  timeout ${LONG_S:-450} python3 scripts/tune.py --target cuda --op matmul --shape 1024,1024,1024 --trials 2000 \
    --strategy ${STRATEGY:-xgb} --batch-size ${BATCH:-32} --db "$DB" --json --no-progress 2>&1 | tail -3 | tee -a "$OUT/tune2000.jsonl"
fi
if [ "$phase" = pipelined ]; then
  # the scheduler in-process (no CLI dependencies beyond distributed), one worker per visible GPU
  python3 -c "import asyncio; from distributed import Scheduler
async def serve():
    async with Scheduler(host='127.0.0.1', port=8786, dashboard_address=None) as s:
        await s.finished()
asyncio.run(serve())" > "$OUT/pipelined_cluster.log" 2>&1 &
  sched=$!; sleep 3
  python3 -m autotune.distributed.workers tcp://127.0.0.1:8786 --target cuda >> "$OUT/pipelined_cluster.log" 2>&1 &
  workers=$!; sleep 8
  start=$(date +%s.%N)
  # --time-budget ends the run with its summary (runner busy share included); the timeout is a backstop
  timeout $(( ${PIPE_S:-240} + 60 )) python3 scripts/tune.py --target cuda --op matmul --shape 1024,1024,1024 \
    --trials ${PIPE_TRIALS:-2000} --time-budget ${PIPE_S:-240} --cluster tcp://127.0.0.1:8786 --batch-size ${BATCH:-32} --db "$DB" --json --no-progress 2>> "$OUT/pipelined_cluster.log" \
    | tail -3 | tee "$OUT/pipelined.txt"
  echo "wall_s $(python3 -c "import sys; print(round($(date +%s.%N) - $start, 1))")" | tee -a "$OUT/pipelined.txt"
  kill -INT $workers; sleep 3; kill $sched 2>/dev/null; wait 2>/dev/null
fi
if [ "$phase" = model ] && [ "${PYTEST_S:-120}" != 0 ]; then
  timeout ${PYTEST_S:-120} python3 -m pytest -q tests/test_cuda_module.py tests/test_torch_baseline.py 2>&1 | tail -15 \
    | tee "$OUT/pytest_model.txt"
fi
if [ "$phase" = model ]; then
  # MODELS: space-separated model[:precision[:trials[:seconds]]] (precision fp32, trials MODEL_TRIALS,
  # seconds MODEL_S by default); a timeout loses nothing (every trial is committed), bench follows
  for item in ${MODELS:-${MODEL:-zoo:resnet18}}; do
    IFS=: read -r scheme name prec trials secs <<< "$item"
    M="$scheme:$name"; [ "$scheme" = zoo ] || { M=$scheme; prec=$name; }
    P=${prec:-fp32}
    S=${secs:-${MODEL_S:-420}}
    # --time-budget ends the run with its summary; the timeout is a backstop
    timeout $(( S + 60 )) python3 scripts/tune.py --model "$M" --target cuda --precision "$P" ${WINOGRAD:+--winograd $WINOGRAD} \
      --trials ${trials:-${MODEL_TRIALS:-1000}} --time-budget "$S" --db "$DB" --batch-size ${BATCH:-16} --json --no-progress 2>&1 \
      | tail -2 | tee -a "$OUT/tune_model.txt"
    timeout ${BENCH_S:-240} python3 scripts/bench.py --model "$M" --target cuda --precision "$P" ${WINOGRAD:+--winograd $WINOGRAD} \
      --db "$DB" --repeat 5 --json --torch-compile-mode ${COMPILE_MODE:-max-autotune} 2>&1 | tail -2 | tee -a "$OUT/bench_model.txt"
  done
fi
if [ "$phase" = tune ] || [ "$phase" = full ]; then
  T=${TRIALS:-200}
  # SPECS: space-separated op:shape[:seconds[:precision]] (seconds defaults to STEP_S, precision to fp32)
  SPECS=${SPECS:-"matmul:1024,1024,1024 matmul:2048,2048,2048 matmul:4096,4096,4096 dense_bias_gelu:128,3072,768
    conv2d:1,64,56,56,64,3,3,1,1 add_relu_mul:8192,8192 softmax:8192,8192 layernorm:8192,8192"}
  for spec in $SPECS; do
    IFS=: read -r op shape secs prec <<< "$spec"; secs=${secs:-${STEP_S:-60}}
    timeout $(( secs + 60 )) python3 scripts/tune.py --target cuda --op "$op" --shape "$shape" --precision "${prec:-fp32}" \
      --trials $T --time-budget "$secs" \
      --db "$DB" --json --no-progress --strategy ${STRATEGY:-random} --batch-size ${BATCH:-16} 2>&1 | tail -1 | tee -a "$OUT/tune.jsonl"
  done
fi
if { [ "$phase" = bench ] || [ "$phase" = tune ] || [ "$phase" = full ]; } && [ "${BENCH_S:-240}" != 0 ]; then
  timeout ${BENCH_S:-240} python3 scripts/bench.py --target cuda --db "$DB" --json --repeat 10 --min-repeat-ms 50 2>&1 | tee "$OUT/bench.txt" | tail -14
fi
[ "${KEEP_DB:-1}" = 0 ] || cp "$DB" "$OUT/" 2>/dev/null || true
