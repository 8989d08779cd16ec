#!/usr/bin/env bash
# One device call: the measured-parts step-time model against real llama runs on this GPU.
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 /tmp/site "$(python3 -c 'import site; print(site.getsitepackages()[0])')" >/dev/null 2>&1
echo "setup $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
python3 -c "import torch, transformers, deepspeed; print(torch.__version__, transformers.__version__, deepspeed.__version__)" 2>/dev/null
export DISTBENCH_CACHE_DIR=$OUT/cache MLFLOW_TRACKING_URI=sqlite:///$OUT/x/mlflow.db
mkdir -p $OUT/x
M1=$(python3 -c "import yaml,json; d=yaml.safe_load(open('conf/model/llama_1b.yaml')); d.pop('defaults'); print(json.dumps(d))")
( time python3 -m distbench.probes.step_parts --device cuda --dtype bf16 --model-json "$M1" --micro-batch-size 4 --seq-len 512 ) 2>&1 | tail -5
echo "parts $(( $(date +%s) - start )) s"
timeout 300 python3 benchmarks/gpu_check.py --no-bare --out-dir $OUT --work-dir $OUT/w \
  --only train-single-ws1,train-ddp-ws1,train-fsdp-ws1,train-dp-ws1,train-zero3-ws1 2>&1 | tail -14
echo "gpu_check $(( $(date +%s) - start )) s"
common="workload.dtype=bf16 world_size=1 hardware=auto hardware.time_source=measured workload.num_warmup_steps=3 workload.num_steps=8"
for s in single dp; do
  timeout 120 python3 run.py strategy=$s $common model=llama_1b batch=medium batch.micro_batch_size=8 batch.seq_len=1024 \
    hydra.run.dir=$OUT/x/llama_1b-b8s1024-$s > $OUT/x/llama_1b-b8s1024-$s.log 2>&1; echo "$s b8s1024 rc=$? $(( $(date +%s) - start )) s"
done
timeout 150 python3 run.py strategy=single $common model=llama3_8b workload.precision=pure batch=small \
  hydra.run.dir=$OUT/x/llama3_8b-small-single-pure > $OUT/x/llama3_8b.log 2>&1; echo "8b rc=$? $(( $(date +%s) - start )) s"
for d in w x; do python3 benchmarks/plan_vs_measured.py --repredict $OUT/$d --out-dir $OUT/pvm_$d 2>&1 | head -14; done
tar czf $OUT/jobs.tgz -C $OUT w x cache 2>/dev/null
rm -rf $OUT/w $OUT/x
echo "total $(( $(date +%s) - start )) s"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu -m gpu -k step_parts 2>&1 | tail -3
echo "total+test $(( $(date +%s) - start )) s"
