"""The largest value each kind of size or count may take, declared once for every option and setting.

Each bound is far above any real model or run on the largest GPU, and far below what makes native code (torch's
allocator, the Rust tokenizer library) ask for an absurd amount of memory: `--vocab-size 2147483647` is refused
while the command line is parsed, not by an allocation that aborts the process. The sizes of a model are those
a `Config` may ask for (`MODEL_SIZES`, checked by `Config.validate` for a config made, loaded or read from a
checkpoint, before any tensor is allocated).

    vocab_size: int = option(4000, "its vocabulary size", minimum=1, maximum=MAX_VOCAB)
"""

from __future__ import annotations

from posformer.utils.validation import LARGEST_INT

MAX_VOCAB = 2**22  # tokens in a vocabulary: 4,194,304 (the largest published ones hold about 256k)
MAX_WIDTH = 2**16  # a model's width (d_model, hidden size): 65,536
MAX_FF = 2**18  # a feed-forward inner size (d_ff, intermediate size): 262,144
MAX_LAYERS = 2**10  # layers of one stack: 1,024
MAX_HEADS = 2**12  # attention heads of one layer: 4,096
MAX_LENGTH = 2**24  # tokens of one sequence, window, prompt, answer or stride: 16,777,216
MAX_BATCH = 2**16  # sequences (windows, prompts) in one batch: 65,536
MAX_BATCH_TOKENS = 2**26  # tokens in one forward pass: 67,108,864
MAX_TOKENS = 2**30  # tokens of an evaluation or search budget: 1,073,741,824
MAX_CHARS = 2**30  # characters of text read for a tokenizer or a run: 1,073,741,824
MAX_STEPS = 2**30  # optimizer steps, warm-up steps and step intervals
MAX_REPEATS = 2**20  # timed iterations, repeats, trials and search rounds: 1,048,576
MAX_BEAMS = 1024  # beams of a beam search, candidates kept per window
MAX_THREADS = 4096  # CPU threads
MAX_EXAMPLES = 2**24  # examples generated for a synthetic task's evaluation: 16,777,216
MAX_ITEMS = LARGEST_INT  # a cap on items taken from a dataset (documents, questions): taken up to what exists
MAX_SEED = LARGEST_INT  # a seed: what Python's, numpy's and torch's generators all take
MAX_SECONDS = 2**24  # a timeout in seconds: about 194 days

# The largest value of each size field of a `Config`: beyond any published model, far below what exhausts a machine.
MODEL_SIZES = {
    "vocab_size": MAX_VOCAB,
    "d_model": MAX_WIDTH,
    "d_ff": MAX_FF,
    "expert_d_ff": MAX_FF,
    "n_layers": MAX_LAYERS,
    "n_decoder_layers": MAX_LAYERS,
    "n_heads": MAX_HEADS,
    "n_kv_heads": MAX_HEADS,
    "d_head": MAX_HEADS,
    "n_experts": MAX_HEADS,
    "experts_per_token": MAX_HEADS,
    "max_positions": MAX_LENGTH,
    "sliding_window": MAX_LENGTH,
    "attention_chunk": MAX_LENGTH,
    "random_positions": MAX_LENGTH,
    "type_vocab_size": 2**16,
    "num_labels": 2**20,
    "sink_tokens": 2**16,
}
