#!/usr/bin/env bash
# Issue 37 on a GPU: two epochs of the article split of the SQuAD v2 dev set, the span head against the generative
# (pointer-generator) BERT2BERT, both from all-MiniLM-L6-v2; then the CUDA-only tests.
#
#   bash docs/results/gpu_qa_two_epochs.sh MODEL_DIR SQUAD_JSON OUT_DIR [cuda|cpu] [EXTRA_QA_TRAIN_FLAGS...]
#
# A smoke run on the CPU: bash docs/results/gpu_qa_two_epochs.sh DIR FILE /tmp/smoke cpu --max-steps 2 \
#   --max-train-samples 64 --max-eval-samples 32
# Each run's eval_results.json, metrics.jsonl and run_config.yaml are packed into OUT_DIR/runs.tgz; the table is
# printed last.
set -u
model=$1
data=$2
out=$3
device=${4:-cuda}
shift 4 || shift $#
extra=("$@")
mkdir -p "$out"
runs=$(mktemp -d)
posformer() { python3 -c "import sys; from posformer.cli import main; sys.exit(main())" "$@"; }

train() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name: qa train $*" | tee -a "$out/qa.log"
    posformer qa train --model "$model" --train-file "$data" --device "$device" --no-progress \
        --per-device-eval-batch-size 128 --output-dir "$runs/$name" "$@" "${extra[@]}" >>"$out/qa.log" 2>&1
    echo "=== $name: exit $? after $((SECONDS - start)) s" | tee -a "$out/qa.log"
    echo "$name $((SECONDS - start))" >>"$runs/walls.txt"
    tar -C "$runs" --exclude='checkpoint*' -czf "$out/runs.tgz" .
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

train span --head span --per-device-train-batch-size 8 --learning-rate 1e-4 --warmup-ratio 0.1 \
    --num-train-epochs 2 --keep-null-windows 0.5 --dropout 0
train seq2seq-pointer --head seq2seq --per-device-train-batch-size 16 --learning-rate 3e-4 --warmup-ratio 0.1 \
    --num-train-epochs 2 --keep-null-windows 0.5 --max-seq-length 192 --doc-stride 64 --pointer-generator \
    --cross-attention-init self_attention --decoder-layers 2 --encoder-span-loss 1

if [ "$device" = cuda ]; then
    timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_flex_attention.py tests/bench/test_bench_runtime.py \
        -k cuda >"$out/cuda_tests.log" 2>&1
    echo "=== CUDA tests: exit $?"
    tail -5 "$out/cuda_tests.log"
fi
train seq2seq-hf-recipe --head seq2seq --per-device-train-batch-size 12 --learning-rate 1e-4 --warmup-ratio 0.1 \
    --num-train-epochs 2 --keep-null-windows 0.5 --max-seq-length 256 --doc-stride 128

python3 - "$runs" <<'EOF'
import json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
walls = dict(line.split() for line in (runs / "walls.txt").read_text().splitlines())
print("| run | EM | F1 | HasAns F1 | NoAns F1 | best_f1 | wall s |")
for name, wall in walls.items():
    path = runs / name / "eval_results.json"
    if not path.exists():
        print(f"| {name} | failed | | | | | {wall} |")
        continue
    r = json.loads(path.read_text())
    cells = [r.get(k, float("nan")) for k in ("exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1")]
    print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {wall} |")
EOF
