"""The model benchmarks of `posformer bench`: the speed of the llama preset against Hugging Face (no flag),
`--generation` (greedy decoding against GPT-2's), `--positions` (the time of each position encoding) and
`--memory` (its memory by length)."""

from __future__ import annotations

from posformer.cli.benchmark import benchmark

SPEED = benchmark(
    "speed",
    "posformer.bench.speed",
    "posformer.bench.benchmark_options.SpeedOptions",
    help="forward and training tokens/s against Hugging Face LlamaForCausalLM and x-transformers",
    description="Measure forward and training throughput (tokens/s) of posformer's Transformer built from the "
    "'llama' preset against Hugging Face LlamaForCausalLM (attn_implementation='sdpa') on the identical "
    "config and, when it is installed, x-transformers' decoder of the same shape, on the same device in the "
    "same precision (default float32 on the CPU), in the same run. On a GPU: --device cuda --precision bf16; "
    "the report gives each model's TFLOP/s and, on a known GPU, its MFU.",
    epilog="Forward: torch.no_grad() forward in eval mode producing logits. Train: forward with labels, "
    "loss.backward() and an AdamW step, in train mode. Each iteration runs posformer, HF, x-transformers in "
    "turn; the median time per iteration gives tokens/s = batch * length / time. 'vs HF' is posformer tok/s "
    "divided by HF tok/s: above 1 posformer is faster, below 1 HF is faster. Model FLOPs per token follow PaLM "
    "(6N + 12*L*H*dh*T per trained token, posformer.bench.flops). The code: posformer.bench.speed. "
    "The other benchmarks: posformer bench --generation, --trainer, --qa, --positions, --memory, --mlm "
    "(each with --help).",
)


GENERATION = benchmark(
    "generation",
    "posformer.bench.generation",
    "posformer.bench.benchmark_options.GenerationOptions",
    help="greedy generation tokens/s against GPT2LMHeadModel.generate",
    description="Measure greedy generation throughput (new tokens/s, KV cache) of posformer against Hugging "
    "Face GPT2LMHeadModel.generate (attn_implementation='sdpa') on identical random weights loaded with "
    "pf.from_hf, in float32 on the CPU, in the same run.",
    epilog="Each iteration runs posformer then HF (ABAB); the median time per generate call gives "
    "tokens/s = batch * new tokens / time. The ratio is posformer tok/s divided by HF tok/s: above 1 "
    "posformer is faster. 'same tokens' says whether both generated identical ids. The code: "
    "posformer.bench.generation.",
)


POSITIONS = benchmark(
    "positions",
    "posformer.bench.positions",
    "posformer.bench.benchmark_options.PositionsOptions",
    help="training and forward time of every position encoding relative to none",
    description="Measure the training-step and forward time of one model per registered position encoding, "
    "identical in everything else (the llama preset's parts at the given size, each encoding with its "
    "default parameters, same seed, same device and precision, SDPA wherever the encoding allows it or "
    "FlexAttention with --attn flex), relative to the model with position='none', in the same run.",
    epilog="Forward: torch.no_grad() forward in eval mode. Train: forward with labels, loss.backward() and an "
    "AdamW step. Every round runs each encoding's model once, in turn (interleaved), so that load on a "
    "shared machine hits all of them alike; x = median time / median time of none. The code: "
    "posformer.bench.positions.",
)


MEMORY = benchmark(
    "memory",
    "posformer.bench.memory",
    "posformer.bench.benchmark_options.MemoryOptions",
    help="peak memory by length of every position encoding, beside none and Hugging Face's models",
    description="Measure the peak memory that one no-grad forward and one training step (forward, backward, AdamW) "
    "add above the built model, by sequence length, for posformer's decoder with each registered position "
    "encoding (the llama preset's parts at the given shape) and, with --peers, for Hugging Face's models of the "
    "same encodings (T5's encoder, BLOOM, Llama, BERT with relative_key) at the same shape. Each cell runs in a "
    "process of its own.",
    epilog="CPU: the process's resident high-water mark after the step minus the one before it; GPU: torch's peak "
    "of allocated memory. A cell that runs out of memory, is killed or outlasts --timeout reads so. x none: the "
    "peak over none's at the longest length. The code: posformer.bench.memory, posformer.bench.memory_probe.",
)
