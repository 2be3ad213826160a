"""The knobs of `posformer extrapolate`, its presets (quick, cpu, bytes, gpu) and the model every row shares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posformer.experiments.corpus import CORPORA, HELD_OUT_BOOKS
from posformer.experiments.extrapolation.retrieval_knobs import RETRIEVAL_MULTIPLES, RetrievalKnobs
from posformer.experiments.mechanism_rows import MECHANISM_ROWS, row_base
from posformer.experiments.presets import from_preset
from posformer.experiments.row_knobs import RowKnobs
from posformer.experiments.training_knobs import TrainingKnobs
from posformer.utils.limits import MAX_BATCH_TOKENS, MAX_CHARS, MAX_LENGTH, MAX_STEPS, MAX_TOKENS, MAX_VOCAB
from posformer.utils.options import option
from posformer.utils.validation import check_field_kinds, check_number, fail, is_int

if TYPE_CHECKING:  # the knobs are read without torch (`posformer extrapolate --help`); the registry at first use
    from posformer.config import Config

PROTOCOLS = ("nonoverlapping", "sliding")  # how `evaluation` cuts the held-out stream
ROPE_SCALINGS = ["linear", "ntk", "dynamic", "yarn"]

PRESETS: dict[str, dict[str, Any]] = {  # each: what differs from the defaults
    # a smoke run: under a minute on one CPU thread, no data outside the package
    "quick": dict(
        corpus="shakespeare",
        wikitext=False,
        train_len=32,
        steps=200,
        batch_size=16,
        lr=5e-3,
        warmup=20,
        d_model=64,
        layers=2,
        heads=2,
        vocab_size=512,
        eval_tokens=4096,
        tokenizer_chars=300_000,
        threads=1,
    ),
    # the benchmark on 2 shared CPU cores: about 45 minutes for the ten rows, evaluation included (measured on
    # one thread: 0.55-0.7 s a step, FIRE 1.3 s; evaluation 25-165 s a row). One thread: with other work on
    # the cores, two OpenMP threads ran up to 10x slower; on 2 idle cores --set threads=2 is faster.
    "cpu": dict(
        steps=300,
        batch_size=16,
        warmup=30,
        eval_tokens=12288,
        eval_batch_tokens=4096,
        train_chars=12_000_000,
        threads=1,
    ),
    # models that read their context: bytes (vocab 257 = 256 bytes + EOS, a BPE without merges) at L=64, where a
    # 0.8M-parameter model leaves the unigram baseline far behind; ~4 minutes a row on 2 idle cores, 32 blocks of
    # 1,024 bytes from each held-out book (96 blocks per eval set) for the bootstrap intervals
    "bytes": dict(
        train_len=64,
        steps=2000,
        lr=3e-3,
        warmup=100,
        d_model=128,
        vocab_size=257,
        eval_tokens=98_304,
        eval_batch_tokens=8192,
        train_chars=20_000_000,
        save_every=500,
        threads=2,
    ),
    # about 100M parameters at L=512 on one GPU, bf16
    "gpu": dict(
        train_len=512,
        steps=5000,
        lr=6e-4,
        warmup=250,
        d_model=768,
        layers=12,
        heads=12,
        vocab_size=16384,
        eval_tokens=262_144,
        eval_batch_tokens=32_768,
        tokenizer_chars=20_000_000,
        save_every=500,
        device="cuda",
        precision="bf16",
    ),
    # which encodings retrieve past L: the passkey source recipe of docs/longeval.md (`runs/pk128`: 600 steps of
    # packed copies, then book windows with passkey prompts) for every row, scored at L, 2L, 4L and 8L on the
    # passkey grid by depth, the suite's single needles and the held-out books' perplexity. pk128's 6,000 steps
    # (4,000 left RoPE at passkey 0.80 at L) and 30% passkey prompts, not its 20% (0.89 at L, under the 0.9 gate;
    # 30%: 0.97): the levers as measured in docs/longeval.md
    "retrieval": dict(
        positions=["none", "rope", "alibi", "t5", "fire", "kerple", "fox", "stick_breaking"],
        rope_scalings=["yarn"],
        steps=6000,
        batch_size=16,
        lr=5e-3,
        warmup=200,
        d_model=128,
        vocab_size=2048,
        wikitext=False,
        eval_tokens=12288,
        eval_batch_tokens=4096,
        train_chars=12_000_000,
        split_digits=True,
        key_smear=True,
        copy_warmup=600,
        passkey_fraction=0.3,
        retrieval_trials=20,
        save_every=500,
        threads=2,
    ),
}


@dataclass
class ExtrapolationSettings(RowKnobs, TrainingKnobs, RetrievalKnobs):
    """Every knob of the benchmark, set by a preset, its flag (those declared with one) or `--set KNOB=VALUE`; the
    rows, the model's shape, the training knobs and the retrieval scoring are the shared groups'."""

    vocab_size: int = option(4096, "BPE vocabulary size", minimum=1, maximum=MAX_VOCAB)
    eval_tokens: int = option(
        16384, "evaluation tokens per eval set (same for every length)", minimum=1, maximum=MAX_TOKENS
    )
    eval_batch_tokens: int = option(
        16384, "tokens per evaluation batch", flag=False, minimum=1, maximum=MAX_BATCH_TOKENS
    )
    protocol: str = option("nonoverlapping", "nonoverlapping or sliding", choices=PROTOCOLS)
    stride: int | None = option(None, "sliding-window stride S (default: L/2)", minimum=1, maximum=MAX_LENGTH)
    corpus: str = option("gutenberg", "gutenberg or shakespeare", choices=CORPORA)
    data_dir: str | None = option(
        None,
        "folder holding gutenberg/ and wikitext-2/ (default: $POSFORMER_DATA_DIR or ../shared/data beside the "
        "repository)",
    )
    held_out: list[str] = option(
        default_factory=lambda: list(HELD_OUT_BOOKS), help="the Gutenberg books kept out of training", flag=False
    )
    wikitext: bool = option(True, "also evaluate on WikiText-2 test", flag=False)
    tokenizer_chars: int = option(2_000_000, "characters used to train the tokenizer", minimum=1, maximum=MAX_CHARS)
    train_chars: int | None = option(
        None,
        "characters used to train the model, spread evenly over the documents (null: all)",
        flag=False,
        minimum=1,
        maximum=MAX_CHARS,
    )
    rope_scalings: list[str] = option(
        default_factory=lambda: list(ROPE_SCALINGS),
        help="the eval-time RoPE scalings the rope row is also evaluated with",
        flag=False,
    )
    key_smear: bool = option(
        False,
        "mix each key with its predecessor's (Olsson et al.'s smeared keys, Config.key_smear): induction, and so "
        "retrieval by content, forms far sooner",
        flag=False,
    )
    split_digits: bool = option(
        False, "BPE: every digit a token of its own (LLaMA), so a number reads the same wherever it sits", flag=False
    )
    suite_fraction: float = option(
        0.0,
        "fraction of training windows replaced by training-split prompts of the long-context suite (`longeval`; "
        "their keys, values and books are disjoint from its evaluation prompts)",
        flag=False,
        low=0.0,
        high=1.0,
    )
    suite_tasks: list[str] | None = option(
        None, "the suite tasks mixed in by suite_fraction (null: every task)", flag=False
    )
    copy_fraction: float = option(
        0.0,
        "fraction of training windows replaced by random tokens in which one segment reappears at a random later "
        "offset: only copying by content predicts it (a warm-up for induction heads, docs/longeval.md)",
        flag=False,
        low=0.0,
        high=1.0,
    )
    copy_warmup: int = option(
        0,
        "steps at the start whose every row is a copy row (copy_fraction's rows) and nothing else is mixed in: "
        "where induction heads form before the language modelling (docs/longeval.md)",
        flag=False,
        minimum=0,
        maximum=MAX_STEPS,
    )
    copy_span: int = option(
        48,
        "tokens of each copy in a warm-up row: a row holds train_len / copy_span short copies back to back, so "
        "induction forms as soon as in short rows at any train_len (docs/longeval.md)",
        flag=False,
        minimum=16,
        maximum=MAX_LENGTH,
    )
    passkey_fraction: float = option(
        0.0,
        "fraction of training windows replaced by passkey prompts of train_len tokens, so that the models learn "
        "retrieval that `posformer extend` then tests",
        flag=False,
        low=0.0,
        high=1.0,
    )

    @classmethod
    def preset(cls, name: str, /, **overrides: Any) -> "ExtrapolationSettings":
        settings = from_preset(cls, PRESETS, name, overrides, "extrapolate")
        if settings.eval_lens is None and is_int(settings.train_len):  # else validate() names train_len
            multiples = RETRIEVAL_MULTIPLES if settings.scores_retrieval else (1, 2, 4, 8, 16)
            settings.eval_lens = [settings.train_len * k for k in multiples]
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ValueError naming the first bad knob: `extrapolate: KNOB=VALUE is invalid: expected ...`."""
        from posformer import positions

        if isinstance(self.positions, str):
            self.positions = [p.strip() for p in self.positions.split(",") if p.strip()]
        check_number(_knob("lr"), self.lr, low=0)  # a negative lr is named so; 0 is refused by the declared range
        for name in ("stride", "train_chars"):
            value = getattr(self, name)
            if value is not None and not (is_int(value) and value >= 1):
                fail(_knob(name), value, "a positive integer or null")
        self.check(_knob(""))
        if (
            not isinstance(self.positions, (list, tuple))
            or not self.positions
            or not all(isinstance(p, str) for p in self.positions)
            or len(set(self.positions)) != len(self.positions)
        ):
            fail(_knob("positions"), self.positions, "a non-empty list of distinct encodings")
        unknown = [p for p in self.positions if p not in positions.names() and p not in MECHANISM_ROWS]
        if unknown:
            raise ValueError(
                f"extrapolate: unknown position encoding(s) {', '.join(unknown)}; registered: "
                f"{', '.join(positions.names())}; mechanisms: {', '.join(MECHANISM_ROWS)}"
            )
        if not isinstance(self.eval_lens, (list, tuple)) or any(not is_int(n) or n < 2 for n in self.eval_lens):
            fail(_knob("eval_lens"), self.eval_lens, "a list of integers >= 2")
        self.eval_lens = sorted(set(self.eval_lens))
        if self.train_len not in self.eval_lens:
            fail(
                _knob("eval_lens"),
                self.eval_lens,
                f"a list that includes train_len={self.train_len} (the reference of the ratios)",
            )
        if self.vocab_size < 257:
            fail(_knob("vocab_size"), self.vocab_size, "an integer >= 257 (256 byte tokens and <|endoftext|>)")
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            fail(_knob("heads"), self.heads, f"a divisor of d_model={self.d_model} giving an even head size")
        if not isinstance(self.rope_scalings, list) or any(s not in ROPE_SCALINGS for s in self.rope_scalings):
            fail(_knob("rope_scalings"), self.rope_scalings, f"a list drawn from {', '.join(ROPE_SCALINGS)}")
        if not isinstance(self.position_params, dict):
            fail(_knob("position_params"), self.position_params, "a mapping {row: {param: value}}")
        if self.suite_tasks is not None:
            from posformer.experiments.longeval.tasks import TASKS

            tasks = self.suite_tasks
            if not isinstance(tasks, list) or not tasks or any(t not in TASKS for t in tasks):
                fail(_knob("suite_tasks"), self.suite_tasks, f"null or a non-empty list drawn from {', '.join(TASKS)}")
        if self.scores_retrieval:
            self.check_retrieval(_knob(""), self.train_len, self.eval_lens, self.positions, self._reads_past_l)
        check_field_kinds(self, "extrapolate: ")

    def _reads_past_l(self, row: str) -> bool:
        """Whether row `row` is a causal LM read past train_len (a Config error names why it cannot be one)."""
        from posformer import positions

        model_config(self, row, self.vocab_size)
        return positions.get(row_base(row)).extrapolates


def _knob(name: str) -> str:
    """A knob's name as every error message of `posformer extrapolate` spells it."""
    return f"extrapolate: {name}"


def d_ff(d_model: int) -> int:
    """The SwiGLU hidden size: 8/3 d_model rounded to a multiple of 64 (LLaMA)."""
    return max(64, 64 * round(8 * d_model / 3 / 64))


def model_config(s: ExtrapolationSettings, position: str, vocab_size: int) -> Config:
    """The row's decoder: identical for every row but the position encoding.

    Pre-norm RMSNorm, SwiGLU, no biases, smeared keys if `key_smear`, tied embeddings, token embeddings times
    sqrt(d_model) (Vaswani et al.; without it the unit-size sinusoids drown the 0.02-std embeddings), attention
    scale 1/sqrt(head size) for every row (T5's own default is 1.0). max_positions: the longest eval length, except
    for encodings that cannot extrapolate (learned): exactly train_len.
    """
    from posformer import positions

    longest = max(s.eval_lens) if positions.get(row_base(position)).extrapolates else s.train_len
    return s.row_config(
        position,
        vocab_size,
        max(longest, s.train_len),
        d_ff(s.d_model),
        scale_embeddings=True,
        attn_scale=1.0 / math.sqrt(s.d_model // s.heads),
        key_smear=s.key_smear,
    )
