#!/usr/bin/env bash
# Issue 37 on a GPU: two epochs of the article split of the SQuAD v2 dev set, the span head against the generative
# (pointer-generator) BERT2BERT, both from all-MiniLM-L6-v2; then the CUDA-only tests.
#
#   bash docs/results/gpu_qa_two_epochs.sh MODEL_DIR SQUAD_JSON OUT_DIR cuda|cpu main|levers [EXTRA_QA_TRAIN_FLAGS...]
#
# main: the span head, the generative model's recipe, the CUDA-only tests, then Hugging Face's recipe, one after the
# other. levers: the generative model with other windows, null windows and decoder depths, side by side on the one
# GPU (each run is launch-bound, so the GPU has room for several).
# A smoke run on the CPU: bash docs/results/gpu_qa_two_epochs.sh DIR FILE /tmp/smoke cpu main --max-steps 2 \
#   --max-train-samples 64 --max-eval-samples 32
# Each run's log, eval_results.json, metrics.jsonl and run_config.yaml are packed into OUT_DIR/NAME.tgz as soon as
# it ends; the table is printed last.
set -u
model=$1
data=$2
out=$3
device=$4
set_name=$5
shift 5
extra=("$@")
mkdir -p "$out"
runs=$(mktemp -d)
posformer() { python3 -c "import sys; from posformer.cli import main; sys.exit(main())" "$@"; }

train() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name: qa train $*"
    mkdir -p "$runs/$name"
    posformer qa train --model "$model" --train-file "$data" --device "$device" --no-progress \
        --per-device-eval-batch-size 128 --output-dir "$runs/$name" "$@" "${extra[@]}" >"$runs/$name.log" 2>&1
    echo "=== $name: exit $? after $((SECONDS - start)) s"
    echo "$name $((SECONDS - start))" >"$runs/$name.wall"
    tar -C "$runs" --exclude='checkpoint*' -czf "$out/$name.tgz" "$name" "$name.log" "$name.wall"
}

cuda_tests() {
    [ "$device" = cuda ] || return 0
    timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_flex_attention.py tests/bench/test_bench_runtime.py \
        -k "cuda or recompile" >"$out/cuda_tests.log" 2>&1
    echo "=== CUDA tests: exit $?"
    tail -5 "$out/cuda_tests.log"
}

pointer=(--head seq2seq --learning-rate 3e-4 --warmup-ratio 0.1 --num-train-epochs 2 --pointer-generator
    --cross-attention-init self_attention --encoder-span-loss 1)

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

if [ "$set_name" = main ]; then
    train span --head span --per-device-train-batch-size 8 --learning-rate 1e-4 --warmup-ratio 0.1 \
        --num-train-epochs 2 --keep-null-windows 0.5 --dropout 0
    train seq2seq-pointer "${pointer[@]}" --per-device-train-batch-size 16 --keep-null-windows 0.5 \
        --max-seq-length 192 --doc-stride 64 --decoder-layers 2
    cuda_tests
    train seq2seq-hf-recipe --head seq2seq --per-device-train-batch-size 12 --learning-rate 1e-4 --warmup-ratio 0.1 \
        --num-train-epochs 2 --keep-null-windows 0.5 --max-seq-length 256 --doc-stride 128
else
    export OMP_NUM_THREADS=3
    train pointer-keep1 "${pointer[@]}" --per-device-train-batch-size 16 --keep-null-windows 1 \
        --max-seq-length 192 --doc-stride 64 --decoder-layers 2 &
    train pointer-384 "${pointer[@]}" --per-device-train-batch-size 8 --keep-null-windows 0.5 --decoder-layers 2 &
    train pointer-384-keep1 "${pointer[@]}" --per-device-train-batch-size 8 --keep-null-windows 1 --decoder-layers 2 &
    train pointer-6-layers "${pointer[@]}" --per-device-train-batch-size 16 --keep-null-windows 0.5 \
        --max-seq-length 192 --doc-stride 64 &
    cuda_tests
    wait
fi

python3 - "$runs" <<'EOF'
import json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
print("| run | EM | F1 | HasAns F1 | NoAns F1 | best_f1 | wall s |")
for wall in sorted(runs.glob("*.wall")):
    name, seconds = wall.read_text().split()
    path = runs / name / "eval_results.json"
    if not path.exists():
        print(f"| {name} | failed | | | | | {seconds} |")
        continue
    r = json.loads(path.read_text())
    cells = [r.get(k, float("nan")) for k in ("exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1")]
    print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {seconds} |")
EOF
