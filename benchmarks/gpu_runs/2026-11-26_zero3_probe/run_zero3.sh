#!/usr/bin/env bash
# ZeRO-3's host work probed (now workloads/train/engine_probe.py) and the measured parts, against llama and
# gpt2 runs on this GPU: each job with hardware.time_source=measured, then re-predicted.
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 /tmp/site "$(python3 -c 'import site; print(site.getsitepackages()[0])')" >/dev/null 2>&1
echo "setup $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
export DISTBENCH_CACHE_DIR=$OUT/cache MLFLOW_TRACKING_URI=sqlite:///$OUT/x/mlflow.db
mkdir -p $OUT/x
common="workload.dtype=bf16 world_size=1 hardware=auto hardware.time_source=measured workload.num_warmup_steps=3 workload.num_steps=8"
job() { name=$1; shift; timeout 150 python3 run.py $common "$@" hydra.run.dir=$OUT/x/$name > $OUT/x/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - start )) s"; grep -h "engine probe\|calibration failed" $OUT/x/$name.log | head -3; }
job llama_1b-medium-zero3 strategy=zero3 model=llama_1b batch=medium
job llama_1b-medium-dp strategy=dp model=llama_1b batch=medium
job llama_1b-medium-single strategy=single model=llama_1b batch=medium
job llama_1b-b8s1024-zero3 strategy=zero3 model=llama_1b batch=medium batch.micro_batch_size=8 batch.seq_len=1024
job gpt2_124m-medium-zero3 strategy=zero3 model=gpt2_124m batch=medium
job gpt2_124m-medium-single strategy=single model=gpt2_124m batch=medium
python3 benchmarks/plan_vs_measured.py --repredict $OUT/x --out-dir $OUT/pvm 2>&1 | head -16
rm -f $OUT/pvm/plan_vs_measured.csv
python3 -c "
import json,sys
for k,v in json.load(open(sys.argv[1])).items(): print(k[:60], json.dumps({a:b for a,b in v.items() if a!='torch_version'}))
" $OUT/cache/engine_parts.json
tar czf $OUT/jobs.tgz -C $OUT x 2>/dev/null; rm -rf $OUT/x
echo "total $(( $(date +%s) - start )) s"
