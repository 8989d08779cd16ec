#!/usr/bin/env bash
# One lent GPU, one call: every one-GPU test of tests/gpu at this commit (the per-step compile
# count, compiled_timed_steps == 0, had only run on CPU ranks), then the issue-26 user sweep
# `strategy=single,dp,zero3 world_size=1 model=llama_1b batch=medium workload.dtype=bf16` beside
# its 2026-11-26 figures. From the repository root, wheels in .whl (../shared/gpu/README.md):
#   bash benchmarks/gpu_runs/2026-11-27_h200_head/run.sh
set -u
start=$(date +%s)
OUT=${OUT:-/tmp/head_out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-420}
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/log.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
python3 -m compileall -q -j 16 /tmp/site src >/dev/null 2>&1
unset PYTHONDONTWRITEBYTECODE DISTBENCH_TIME_SOURCE
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log.txt"
python3 -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)" 2>/dev/null | tail -1 | tee -a "$OUT/log.txt"
git log -1 --format='code at %h' 2>/dev/null | tee -a "$OUT/log.txt"
log "setup done"
work=/tmp/head_work; rm -rf $work; mkdir -p $work
export DISTBENCH_CACHE_DIR=$work/cache MLFLOW_TRACKING_URI=sqlite:///$work/mlflow.db

# 1. every one-GPU test (the two-GPU ones skip with their reason)
timeout $(( $(left) - 100 )) python3 -m pytest -q tests/gpu -p no:cacheprovider --durations=0 -rs > $OUT/pytest.txt 2>&1
log "gpu tests rc=$? $(tail -1 $OUT/pytest.txt)"

# 2. the user sweep of issue 26's first line, if time is left
if [ "$(left)" -gt 90 ]; then
  timeout $(( $(left) - 10 )) python3 run.py -m strategy=single,dp,zero3 world_size=1 model=llama_1b \
    batch=medium workload.dtype=bf16 hydra.sweep.dir=$work/sweep > $work/sweep.log 2>&1
  log "sweep rc=$?"; tail -12 $work/sweep.log | cut -c1-220 | tee -a "$OUT/log.txt"
  python3 - "$work/sweep" > $OUT/sweep_outcomes.json <<'PY'
import json, pathlib, sys
rows = []
for p in sorted(pathlib.Path(sys.argv[1]).glob("*/outcome.json")):
    o = json.loads(p.read_text()); m = o.get("metrics", {})
    rows.append({"job": p.parent.name, "strategy": o.get("strategy"), "status": o.get("status"),
                 **{k: m.get(k) for k in ("step_time_s_p50", "peak_mem_gib", "pred_step_time_s",
                    "pred_peak_mem_gib", "mfu_pct", "init_time_s", "compiled_timed_steps")}})
print(json.dumps(rows, indent=1))
PY
fi
tar czf "$OUT/jobs.tgz" -C $work --exclude='*.pt' --exclude='*.safetensors' --exclude=cache . 2>/dev/null
log "total"
