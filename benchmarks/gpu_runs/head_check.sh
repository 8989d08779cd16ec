#!/usr/bin/env bash
# The one-call GPU check of the code as it stands, for the next lent GPU (prepared 2026-11-28, when
# the device tool lent none: nothing here has run on a GPU yet). The long-sequence recipes beside
# the bare script (2026-11-27_h200_recipes/run.sh's steps 1-2: llama_1b at 1 x 8192 tokens,
# checkpointing none/full/selective and compile), llama3_8b fsdp with full checkpointing (plan,
# then the run), then every one-GPU test (tests/gpu) with the time left. From the repository
# root, wheels in .whl (../shared/gpu/README.md), carry [".whl"], one call of ~560 s:
#   BUDGET_S=540 bash benchmarks/gpu_runs/head_check.sh
# SMOKE=1 runs it on CPU with the tiny model (a check before the device call: ~65 s here).
set -u
start=$(date +%s)
OUT=${OUT:-/tmp/head_out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-530}
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/log.txt"; }
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/log.txt"

# 1-2. the recipes, bare and distbench (installs the wheels on the device)
OUT=$OUT/recipes ONLY_1B=1 BUDGET_S=400 bash benchmarks/gpu_runs/2026-11-27_h200_recipes/run.sh
log "recipes done"
if [ -z "${SMOKE:-}" ]; then
  export PYTHONPATH=/tmp/site:$PWD/src; PY=python3; M8=llama3_8b; SEQ=8192; DTYPE=bf16
else
  export PYTHONPATH=$PWD/src; PY=.venv/bin/python; M8=tiny; SEQ=64; DTYPE=fp32
fi
unset PYTHONDONTWRITEBYTECODE DISTBENCH_TIME_SOURCE
work=/tmp/head_work; rm -rf $work; mkdir -p $work
export DISTBENCH_CACHE_DIR=$work/cache MLFLOW_TRACKING_URI=sqlite:///$work/mlflow.db
save() { tar czf "$OUT/jobs8b.tgz" -C $work --exclude='*.pt' --exclude='*.safetensors' . 2>/dev/null; }

# 3. llama3_8b, fsdp at world size 1, full checkpointing, 8192 tokens: the plan's verdict, then the run
plan8="model=$M8 world_size=1 strategy=fsdp activation_checkpointing=full workload.dtype=$DTYPE batch=seq8k batch.seq_len=$SEQ"
timeout 60 $PY -m distbench.cli plan $plan8 hardware=auto --json > $OUT/plan8b.json 2> $work/plan8b.err
log "plan 8b rc=$?"
if [ "$(left)" -gt 200 ]; then
  timeout 150 $PY run.py $plan8 hardware=auto workload.num_warmup_steps=2 workload.num_steps=5 hydra.run.dir=$work/llama3_8b_fsdp_full > $work/8b.log 2>&1
  log "8b rc=$?"; tail -4 $work/8b.log | cut -c1-300; save
fi

# 4. every one-GPU test, one line each (a timeout keeps the lines already written)
if [ -z "${SMOKE:-}" ] && [ "$(left)" -gt 40 ]; then
  timeout $(( $(left) - 8 )) $PY -m pytest -v tests/gpu -p no:cacheprovider -rs > $OUT/pytest.txt 2>&1
  log "gpu tests rc=$? $(tail -1 $OUT/pytest.txt)"
fi
save
log "total"
