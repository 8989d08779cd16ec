#!/usr/bin/env bash
# The second call: the corrected GPU test of measured step parts (a run never probes under
# `auto`; `time_source=measured` measures, the next `auto` job reads the cache), then llama_1b at
# one micro-batch of 4 x 512 tokens (bf16-mixed, strategy=single) beside the bare script doing
# the same steps, alternated (bare, distbench, bare): is call 1's 0.289 s per step at batch=medium
# this machine or distbench?
#   bash benchmarks/gpu_runs/2026-11-27_h200_head/run2.sh
set -u
start=$(date +%s)
OUT=${OUT:-/tmp/head_out}; mkdir -p "$OUT"
elapsed() { echo $(( $(date +%s) - start )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/log2.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
python3 -m compileall -q -j 16 /tmp/site src >/dev/null 2>&1
unset PYTHONDONTWRITEBYTECODE DISTBENCH_TIME_SOURCE
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log2.txt"
log "setup done"
work=/tmp/head_work; rm -rf $work; mkdir -p $work
export DISTBENCH_CACHE_DIR=$work/cache MLFLOW_TRACKING_URI=sqlite:///$work/mlflow.db

timeout 90 python3 -m pytest -q tests/gpu -k step_parts_are_measured -p no:cacheprovider > $OUT/pytest2.txt 2>&1
log "gpu test rc=$? $(tail -1 $OUT/pytest2.txt)"

python3 -c 'import json; json.dump({"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192, "max_position_embeddings": 131072, "tie_word_embeddings": True}, open("'$work'/llama_1b.json", "w"))'
bare() { timeout 60 python3 benchmarks/bare/bare_recipes.py --model-config $work/llama_1b.json --micro-batch-size 4 \
  --seq-len 512 --variants none --num-warmup-steps 3 --num-steps 20 2>>$work/bare.err | head -1 >> $OUT/bare2.jsonl; log "bare rc=$? $(tail -1 $OUT/bare2.jsonl | head -c 160)"; }
bare
timeout 100 python3 run.py strategy=single world_size=1 model=llama_1b batch=medium batch.grad_accum_steps=1 \
  workload.dtype=bf16 workload.num_warmup_steps=3 workload.num_steps=20 hydra.run.dir=$work/single > $work/single.log 2>&1
log "distbench rc=$?"; grep -h '"step_time_s_p50"\|"peak_mem_gib"' -m2 $work/single/outcome.json 2>/dev/null
python3 -c "import json; m=json.load(open('$work/single/outcome.json'))['metrics']; print(json.dumps({k: m.get(k) for k in ('step_time_s_p50','peak_mem_gib','pred_step_time_s','pred_peak_mem_gib','mfu_pct')}))" | tee $OUT/distbench2.json
bare
tar czf "$OUT/jobs2.tgz" -C $work --exclude=cache single bare.err 2>/dev/null
log "total"
