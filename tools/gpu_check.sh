#!/usr/bin/env bash
# One GPU pass over the course, as .github/workflows/gpu.yml runs it: every
# chapter and exercise-solution notebook under nbval with COURSE_REQUIRE_GPU=1
# (a notebook that allocates no CUDA memory fails unless marked cpu_only), then
# the library's tests, whose module contracts add a CUDA row for every module.
# Writes the pytest logs and gpu_run.json (python tools/gpu_summary.py) to
# ${OUT:-_build/gpu}; copy gpu_run.json to book/ to show it on the status page.
#
# On a machine whose Python lacks the Jupyter stack, put wheels for it in .whl/
# (they are installed to /tmp/site) and the data files in .gpudata/data.
set -o pipefail
OUT=${OUT:-_build/gpu}
mkdir -p "$OUT"
start=$(date +%s)
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
fi
[ -d .gpudata/data ] && export COURSE_DATA_DIR=$PWD/.gpudata/data
export OMP_NUM_THREADS=2 PYTHONUNBUFFERED=1 MPLBACKEND=Agg
WORKERS=${WORKERS:-12}
export COLUMNS=300  # untruncated one-line failure reasons
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# Every notebook at once on WORKERS processes sharing the GPU (nbval, lax mode).
# The execution cache is not written: several workers would share one sqlite file.
COURSE_REQUIRE_GPU=1 COURSE_NO_EXEC_CACHE=1 timeout ${NB_TIMEOUT:-330} python3 -m pytest \
  ${NOTEBOOKS:-notebooks solutions} -p no:cacheprovider -n "$WORKERS" --dist loadfile -q -rfE \
  --durations=0 -o addopts="--nbval-lax --nbval-current-env --nbval-cell-timeout=300" \
  >"$OUT/notebooks.log" 2>&1
echo "notebooks rc=$? at $(( $(date +%s) - start )) s"
timeout ${UNIT_TIMEOUT:-150} python3 -m pytest -p no:cacheprovider -n "$WORKERS" -q -rfE -o addopts="" \
  tests/test_module_contracts.py tests/test_attention.py tests/test_positional.py \
  tests/test_transformer.py tests/test_gpt.py tests/test_bert.py tests/test_vit.py tests/test_gat.py \
  tests/test_swin.py tests/test_timeseries.py tests/test_training.py tests/test_rnn.py \
  tests/test_seq2seq.py tests/test_embeddings.py tests/test_convnet.py tests/test_runtime.py \
  tests/test_masks.py tests/test_lm.py tests/test_sparse.py tests/test_gat_training.py \
  tests/test_time_encoding.py tests/test_forecasting.py tests/test_callbacks.py \
  tests/test_distributed.py tests/test_sweep.py \
  >"$OUT/unit.log" 2>&1
echo "unit rc=$? total $(( $(date +%s) - start )) s"
python3 tools/gpu_summary.py "$OUT" --workers "$WORKERS" > "$OUT/gpu_run.json"
python3 tools/gpu_summary.py "$OUT" --workers "$WORKERS" --text
