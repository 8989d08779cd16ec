#!/usr/bin/env bash
# The measured-parts model (fused attention timed at its shapes) against llama runs on this GPU.
set -u
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 16 /tmp/site "$(python3 -c 'import site; print(site.getsitepackages()[0])')" >/dev/null 2>&1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
export DISTBENCH_CACHE_DIR=$OUT/cache MLFLOW_TRACKING_URI=sqlite:///$OUT/x/mlflow.db
mkdir -p $OUT/x
common="workload.dtype=bf16 world_size=1 hardware=auto hardware.time_source=measured workload.num_warmup_steps=3 workload.num_steps=8"
job() { name=$1; shift; timeout 100 python3 run.py $common "$@" hydra.run.dir=$OUT/x/$name > $OUT/x/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - start )) s"; }
for s in single dp; do job llama_1b-medium-$s strategy=$s model=llama_1b batch=medium; done
for s in single dp; do job llama_1b-b8s1024-$s strategy=$s model=llama_1b batch=medium batch.micro_batch_size=8 batch.seq_len=1024; done
job llama3_8b-small-single-pure strategy=single model=llama3_8b workload.precision=pure batch=small
python3 benchmarks/plan_vs_measured.py --repredict $OUT/x --out-dir $OUT/pvm 2>&1 | head -14
rm -f $OUT/pvm/plan_vs_measured.csv
tar czf $OUT/jobs.tgz -C $OUT x 2>/dev/null; rm -rf $OUT/x
echo "total $(( $(date +%s) - start )) s"
