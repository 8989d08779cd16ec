#!/usr/bin/env bash
# Issue 26 item 7 and issue 27 item 8 on one lent GPU, in one call: llama_1b at 1 x 8192 tokens
# (bf16-mixed, strategy=single) with activation_checkpointing=none,full,selective and
# workload.compile=true beside a bare script doing the same steps (benchmarks/bare/bare_recipes.py);
# llama3_8b with full checkpointing at 8192 tokens (fsdp, world size 1: plan and run agree?);
# distbench's eager decode against transformers' generate for llama3_8b; the GPU tests of the
# checkpointing and compile paths. From the repository root, wheels in .whl (../shared/gpu/README.md):
#   bash benchmarks/gpu_runs/2026-11-27_h200_recipes/run.sh
# SMOKE=1 runs the same script on CPU with the tiny model (a check before a device call);
# ONLY_1B=1 runs steps 1 and 2 alone (the second call: the bare script without a KV cache).
set -u
start=$(date +%s)
here=benchmarks/gpu_runs/2026-11-27_h200_recipes
OUT=${OUT:-/tmp/recipes_out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-500}
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/log.txt"; }
if [ -z "${SMOKE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
  python3 -m compileall -q -j 16 /tmp/site src >/dev/null 2>&1
  PY=python3; DEVICE=cuda
  M1=llama_1b; M8=llama3_8b; SEQ=8192; DTYPE=bf16
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log.txt"
else
  export PYTHONPATH=$PWD/src; PY=.venv/bin/python; DEVICE=cpu
  M1=tiny; M8=tiny; SEQ=64; DTYPE=fp32
fi
unset PYTHONDONTWRITEBYTECODE DISTBENCH_TIME_SOURCE
$PY -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)" 2>/dev/null | tail -1 | tee -a "$OUT/log.txt"
log "setup done"
work=/tmp/recipes_work; rm -rf $work; mkdir -p $work
export DISTBENCH_CACHE_DIR=$work/cache MLFLOW_TRACKING_URI=sqlite:///$work/mlflow.db
save() { tar czf "$OUT/jobs.tgz" -C $work --exclude='*.pt' --exclude='*.safetensors' . 2>/dev/null; }

# 1. the bare recipes, llama_1b's config (conf/model/llama_1b.yaml) as transformers takes it
$PY - > $work/llama_1b.json <<'PY'
import json, sys
cfg = {"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
       "num_key_value_heads": 8, "intermediate_size": 8192, "max_position_embeddings": 131072,
       "tie_word_embeddings": True}
json.dump(cfg, sys.stdout)
PY
bare_cfg="--model-config $work/llama_1b.json"; [ -n "${SMOKE:-}" ] && bare_cfg="--variants none,full"
timeout 200 $PY benchmarks/bare/bare_recipes.py $bare_cfg --device $DEVICE --seq-len $SEQ \
  --num-warmup-steps 3 --num-steps 10 > $OUT/bare.jsonl 2> $work/bare.err
log "bare rc=$? $(tail -1 $OUT/bare.jsonl | head -c 300)"; tail -3 $work/bare.err

# 2. distbench: the same model and batch, three checkpointing modes in one sweep, then compile
common="strategy=single world_size=1 model=$M1 batch=seq8k batch.seq_len=$SEQ workload.dtype=$DTYPE hardware=auto hardware.time_source=measured workload.num_warmup_steps=3 workload.num_steps=8"
timeout 240 $PY run.py -m $common activation_checkpointing=none,full,selective hydra.sweep.dir=$work/ac > $work/ac.log 2>&1
log "ac sweep rc=$?"; tail -8 $work/ac.log; save
if [ -z "${SMOKE:-}" ] && [ "$(left)" -gt 200 ]; then
  timeout 150 $PY run.py $common workload.compile=true hydra.run.dir=$work/compile > $work/compile.log 2>&1
  log "compile rc=$?"; tail -5 $work/compile.log; save
fi

if [ -n "${ONLY_1B:-}" ]; then save; log "total"; exit 0; fi

# 3. llama3_8b, fsdp at world size 1, full checkpointing, 8192 tokens: the plan's verdict, then the run
plan8="model=$M8 world_size=1 strategy=fsdp activation_checkpointing=full workload.dtype=$DTYPE batch=seq8k batch.seq_len=$SEQ"
timeout 60 $PY -m distbench.cli plan $plan8 hardware=auto --json > $OUT/plan8b.json 2> $work/plan8b.err
log "plan 8b rc=$?"
if [ "$(left)" -gt 150 ]; then
  timeout 180 $PY run.py $plan8 hardware=auto workload.num_warmup_steps=2 workload.num_steps=5 hydra.run.dir=$work/llama3_8b_fsdp_full > $work/8b.log 2>&1
  log "8b rc=$?"; tail -6 $work/8b.log; save
fi

# 4. decode against generate (issue 27 item 8)
if [ "$(left)" -gt 90 ]; then
  dec="--models $M8 --device $DEVICE --dtype $DTYPE --batch-size 4 --prompt-len 512 --new-tokens 64 --repeats 3"
  [ -n "${SMOKE:-}" ] && dec="--quick"
  timeout 150 $PY benchmarks/decode_vs_generate.py $dec > $work/decode.log 2>&1
  log "decode rc=$?"; cp benchmarks/results/decode_vs_generate.json $work/ 2>/dev/null; tail -12 $work/decode.log | cut -c1-200; save
fi

# 5. the GPU tests of the new paths (skip themselves on CPU)
if [ "$(left)" -gt 70 ]; then
  timeout $(( $(left) - 10 )) $PY -m pytest -q tests/gpu -k "ac or compile" -p no:cacheprovider > $OUT/pytest.txt 2>&1
  log "gpu tests rc=$? $(tail -1 $OUT/pytest.txt)"
fi
save
log "total"
