#!/usr/bin/env bash
# The default hardware.time_source=auto on a GPU, with the ZeRO-3 engine probe at the job's own
# micro-batch shape, against llama and gpt2 runs; then re-predicted. ONLY_ZERO3=1 runs the three
# ZeRO-3 jobs alone (the H100 call). From the repository root, wheels in .whl (../shared/gpu/README.md):
#   bash benchmarks/gpu_runs/2026-11-26_job_shape_probe/run.sh
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
unset PYTHONDONTWRITEBYTECODE DISTBENCH_TIME_SOURCE
python3 -m compileall -q -j 16 /tmp/site "$(python3 -c 'import site; print(site.getsitepackages()[0])')" >/dev/null 2>&1
echo "setup $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, deepspeed, transformers; print(torch.__version__, deepspeed.__version__, transformers.__version__)" 2>/dev/null | tail -1
export DISTBENCH_CACHE_DIR=$OUT/cache MLFLOW_TRACKING_URI=sqlite:///$OUT/x/mlflow.db
mkdir -p $OUT/x
common="workload.dtype=bf16 world_size=1 hardware=auto workload.num_warmup_steps=3 workload.num_steps=8"
job() { name=$1; shift; timeout 150 python3 run.py $common "$@" hydra.run.dir=$OUT/x/$name > $OUT/x/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - start )) s $(grep -h 'time_source' $OUT/x/$name/resolved.yaml 2>/dev/null | head -1)"; grep -h "engine probe\|calibration failed\|Error" $OUT/x/$name.log | head -3; cp $OUT/cache/*.json $OUT/ 2>/dev/null; tar czf $OUT/jobs.tgz -C $OUT x 2>/dev/null; }
job llama_1b-medium-zero3 strategy=zero3 model=llama_1b batch=medium
job llama_1b-b8s1024-zero3 strategy=zero3 model=llama_1b batch=medium batch.micro_batch_size=8 batch.seq_len=1024
job gpt2_124m-medium-zero3 strategy=zero3 model=gpt2_124m batch=medium
if [ -z "${ONLY_ZERO3:-}" ]; then
job llama_1b-medium-single strategy=single model=llama_1b batch=medium
job llama_1b-medium-dp strategy=dp model=llama_1b batch=medium
if [ $(( $(date +%s) - start )) -lt 330 ]; then
  job gpt2_124m-medium-single strategy=single model=gpt2_124m batch=medium
fi
fi
python3 benchmarks/plan_vs_measured.py --repredict $OUT/x --out-dir $OUT/pvm 2>&1 | head -20
rm -f $OUT/pvm/plan_vs_measured.csv
cp $OUT/cache/*.json $OUT/ 2>/dev/null
python3 -c "
import json,sys
for k,v in json.load(open(sys.argv[1])).items(): print(k[:60], json.dumps({a:b for a,b in v.items() if a!='torch_version'}))
" $OUT/cache/engine_parts.json
if [ -z "${ONLY_ZERO3:-}" ] && [ $(( $(date +%s) - start )) -lt 400 ]; then
  timeout 90 python3 -m pytest -q -x tests/gpu/test_gpu.py -k "probed or measured" -p no:cacheprovider 2>&1 | tail -4
fi
tar czf $OUT/jobs.tgz -C $OUT x 2>/dev/null; rm -rf $OUT/x $OUT/cache
echo "total $(( $(date +%s) - start )) s"
