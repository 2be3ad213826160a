"""A training run's settings: the model, the data and the trainer, read from YAML with `--set` overrides.

```yaml
model: {preset: llama, d_model: 128, n_layers: 4, n_heads: 4, d_ff: 352}   # or any Config fields
data:  {train: [books/, web.jsonl], valid: [held_out.txt], tokenizer: char, seq_len: 128}
trainer: {steps: 500, batch_size: 32, lr: 3.0e-3, schedule: cosine, warmup: 50}
```

Every value is validated before any work starts; errors name the field
(`trainer.lr=-1 is invalid: expected a number > 0`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from posformer.data.dataset_files import import_datasets
from posformer.data.documents import needs_datasets
from posformer.data.text_files import default_corpus
from posformer.train.knobs import OptimizerKnobs
from posformer.train.trackers import check_trackers
from posformer.utils.limits import MAX_LENGTH, MAX_REPEATS, MAX_STEPS
from posformer.utils.options import check_options, option
from posformer.utils.user_files import parse_yaml, read_yaml_file, regular_file
from posformer.utils.validation import (
    check_field_kinds,
    excerpt,
    fail,
    is_int,
    is_number,
)

SCHEDULES = ("constant", "linear", "cosine")
NAN_POLICIES = ("stop", "skip")
PARALLEL = ("ddp", "fsdp")


@dataclass
class TrainerSettings(OptimizerKnobs):
    """How to train: optimizer, schedule, precision, evaluation, checkpoints; the knobs every run sets
    (`knobs.OptimizerKnobs`: steps, batch_size, lr, warmup, min_lr_ratio, weight_decay, seed, device, precision)
    first.

    The batch of one optimizer step is batch_size * grad_accum * world_size
    sequences. lr follows `schedule` after `warmup` linear steps; "linear" and
    "cosine" decay to min_lr_ratio * lr at `steps`. `compile`: run the training
    forward and backward through `torch.compile` (compiled at the first step, again
    if the batch shape changes; evaluation stays eager); see docs/speed.md. `activation_checkpointing`: keep
    only each block's input for the backward pass and run the block again there
    (`Transformer.set_activation_checkpointing`): the same losses, far less memory at long lengths, about a
    third more compute. `tensorboard` (None: when the package is installed) and `wandb_project` send the scalars
    of metrics.jsonl there too (`train.trackers`).
    """

    grad_accum: int = option(
        1, "micro-batches per optimizer step (gradient accumulation)", minimum=1, maximum=MAX_REPEATS
    )
    schedule: str = option(
        "cosine",
        "the lr after the warm-up: constant, or a linear or cosine decay to min_lr_ratio * lr",
        choices=SCHEDULES,
    )
    betas: tuple[float, float] = option((0.9, 0.95), "AdamW's two betas, each in [0, 1)")
    clip_grad: float | None = option(1.0, "clip the gradients' global norm to this (null: no clipping)")
    parallel: str = option(
        "ddp", "under torchrun: ddp (a copy of the model per process) or fsdp (the model sharded)", choices=PARALLEL
    )
    eval_every: int = option(100, "steps between evaluations (and the last step)", minimum=1, maximum=MAX_STEPS)
    eval_batches: int = option(8, "validation batches per evaluation", minimum=1, maximum=MAX_STEPS)
    save_every: int | None = option(
        None, "steps between checkpoints (default: eval_every)", minimum=1, maximum=MAX_STEPS
    )
    keep_last: int = option(3, "checkpoints kept, the newest", minimum=1, maximum=MAX_REPEATS)
    log_every: int = option(
        10,
        "unused: every step is written to metrics.jsonl (kept so that older run configs load)",
        minimum=1,
        maximum=MAX_STEPS,
    )
    nan_policy: str = option(
        "stop", "a non-finite loss: stop the run, or skip its batch (at most max_skipped_batches)", choices=NAN_POLICIES
    )
    max_skipped_batches: int = option(
        10, "batches nan_policy=skip may skip before the run stops", minimum=0, maximum=MAX_STEPS
    )
    max_minutes: float | None = option(None, "stop, with a checkpoint, after this many minutes (null: no limit)")
    sample_prompt: str | None = option("ROMEO:\n", "the prompt of a sample generated after training (null: none)")
    sample_tokens: int = option(200, "tokens of that sample (0: none)", minimum=0, maximum=MAX_LENGTH)
    compile: bool = option(False, "the training forward and backward through torch.compile (docs/speed.md)")
    activation_checkpointing: bool = option(
        False, "recompute each block in the backward pass: the same losses, far less memory, a third more compute"
    )
    tensorboard: bool | None = option(None, "send the scalars to TensorBoard too (default: when it is installed)")
    wandb_project: str | None = option(None, "send the scalars to this Weights & Biases project too (null: none)")

    def validate(self) -> None:
        if self.save_every is not None and not (is_int(self.save_every) and self.save_every >= 1):
            fail("trainer.save_every", self.save_every, "a positive integer, or null for eval_every")
        pair = isinstance(self.betas, (tuple, list)) and len(self.betas) == 2
        if not (pair and all(is_number(b) and 0 <= b < 1 for b in self.betas)):
            fail("trainer.betas", self.betas, "two numbers in [0, 1)")
        if self.clip_grad is not None and not (is_number(self.clip_grad) and self.clip_grad > 0):
            fail("trainer.clip_grad", self.clip_grad, "a number > 0, or null for no clipping")
        for name in ("compile", "activation_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                fail(f"trainer.{name}", getattr(self, name), "true or false")
        if self.tensorboard is not None and not isinstance(self.tensorboard, bool):
            fail("trainer.tensorboard", self.tensorboard, "true, false or null (when the package is installed)")
        if self.wandb_project is not None and not (isinstance(self.wandb_project, str) and self.wandb_project):
            fail("trainer.wandb_project", self.wandb_project, "a W&B project name, or null")
        check_trackers(self.tensorboard, self.wandb_project)  # their packages, before any work
        if self.max_minutes is not None and not (is_number(self.max_minutes) and self.max_minutes > 0):
            fail("trainer.max_minutes", self.max_minutes, "a number > 0, or null")
        check_options(self, "trainer.")  # every declared range and choice (the knobs of every run: `OptimizerKnobs`)
        check_field_kinds(self, "trainer.")

    @property
    def checkpoint_every(self) -> int:
        return self.save_every or self.eval_every


@dataclass
class DataSettings:
    """The documents of a causal LM. `valid` empty: the last `valid_fraction` of the training tokens.

    train, valid: paths of documents (`posformer.data.documents`): a text file is one document; a .jsonl file one
    per line (its `text_field`); a directory its .txt, .jsonl and .parquet files and saved datasets, recursively,
    sorted by path; Hugging Face datasets (a `save_to_disk` directory, .json or .parquet files) need `datasets`.
    The token stream is each document's ids followed by the tokenizer's end-of-document (EOD) id.
    tokenizer: "char" (one id per character of the training text, and the EOD `<|endoftext|>`), "bytes" (256
    ids and the EOD), a directory holding a Hugging Face tokenizer (its eos token is the EOD), or a `tokenizers`
    tokenizer.json file (`posformer.data.lm_tokenizers`).
    pack_documents: False: training windows are cut from the one token stream, so a window's attention and
    positions run across documents. True: each row packs whole documents (`data.packing`; a longer one is cut
    into rows), and each attends only within itself with its positions restarting at 0 (`document_ids`), for
    training and evaluation alike.
    """

    train: list[str] = option(
        default_factory=lambda: [str(default_corpus())],
        help="files and directories of training documents (default: the shipped Tiny Shakespeare sample)",
    )
    valid: list[str] = option(
        default_factory=list, help="files and directories of validation documents (default: none, valid_fraction)"
    )
    valid_fraction: float = option(0.1, "with no valid documents: the last fraction of the training tokens, in (0, 1)")
    tokenizer: str = option("char", "char, bytes, a Hugging Face tokenizer directory or a tokenizer.json file")
    seq_len: int = option(128, "tokens per training window (and per evaluation window)", minimum=2, maximum=MAX_LENGTH)
    text_field: str = option("text", "the field of a .jsonl record or dataset row that holds the text")
    pack_documents: bool = option(False, "pack whole documents per row, each attending within itself from position 0")

    def validate(self) -> None:
        if isinstance(self.train, str):
            self.train = [self.train]
        if isinstance(self.valid, str):
            self.valid = [self.valid]
        check_field_kinds(self, "data.")
        if not self.train:
            fail("data.train", self.train, "at least one file or directory of documents")
        if not self.text_field:
            fail("data.text_field", self.text_field, "the name of the field that holds the text")
        for name in ("train", "valid"):
            for path in getattr(self, name):
                regular_file(path, f"data.{name}: {path}", directory=True)
                if needs_datasets(Path(path)):
                    try:
                        import_datasets()
                    except ImportError as err:
                        raise ImportError(f"data.{name}: {path}: {err}") from err
        if not self.valid and not (is_number(self.valid_fraction) and 0 < self.valid_fraction < 1):
            fail("data.valid_fraction", self.valid_fraction, "a number in (0, 1) when data.valid is empty")
        check_options(self, "data.")  # seq_len's range


DEMO_MODEL = dict(
    arch="decoder",
    d_model=128,
    n_layers=4,
    n_heads=4,
    d_ff=352,
    position="rope",
    norm="rmsnorm",
    norm_placement="pre",
    activation="swiglu",
    qkv_bias=False,
    attn_out_bias=False,
    ffn_bias=False,
    tie_embeddings=True,
)


@dataclass
class RunSettings:
    """The whole run: `model` holds Config fields (or `preset` plus overrides); vocab_size comes from the data."""

    model: dict = field(default_factory=lambda: dict(DEMO_MODEL))
    data: DataSettings = field(default_factory=DataSettings)
    trainer: TrainerSettings = field(default_factory=TrainerSettings)

    def validate(self) -> None:
        if not isinstance(self.model, dict):
            fail("model", self.model, "a mapping of Config fields (optionally with 'preset')")
        self.trainer.validate()
        self.data.validate()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSettings":
        unknown = sorted(set(data) - {"model", "data", "trainer"})
        if unknown:
            raise ValueError(f"run config has unknown section(s) {unknown}: expected model, data, trainer")
        if not isinstance(data.get("model") or {}, dict):
            fail("model", data["model"], "a mapping of Config fields (optionally with 'preset')")
        return cls(
            model=dict(data.get("model") or DEMO_MODEL),
            data=_section(DataSettings, data.get("data") or {}, "data"),
            trainer=_section(TrainerSettings, data.get("trainer") or {}, "trainer"),
        )


def _section(cls, values: dict, name: str):
    if not isinstance(values, dict):
        fail(name, values, "a mapping")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{name} has unknown key(s) {unknown}; known keys: {', '.join(sorted(known))}")
    values = dict(values)
    if isinstance(values.get("betas"), list):
        values["betas"] = tuple(values["betas"])
    return cls(**values)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `section.key=value` strings (values parsed as YAML) to a run-config dict."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) != 2 or parts[0] not in ("model", "data", "trainer") or not parts[1]:
            raise ValueError(
                f"--set {excerpt(item)}: expected SECTION.KEY=VALUE with SECTION one of model, data, trainer "
                "(e.g. trainer.lr=1e-3 or model.position=alibi)"
            )
        data.setdefault(parts[0], {})
        if data[parts[0]] is None:
            data[parts[0]] = {}
        data[parts[0]][parts[1]] = parse_yaml(raw, f"--set {excerpt(item)}: the value")
    return data


def load_run_settings(path: str | None, overrides: list[str] | None = None) -> RunSettings:
    """Read a YAML (or JSON) run config, apply `--set` overrides and validate everything."""
    data: dict = {}
    if path is not None:
        data = read_yaml_file(path, "run config") or {}
        if not isinstance(data, dict):
            raise ValueError(f"run config {path}: expected a mapping with sections model, data, trainer")
    if "model" not in data and any(o.startswith("model.") for o in overrides or []):
        data["model"] = dict(DEMO_MODEL)
    settings = RunSettings.from_dict(apply_overrides(data, list(overrides or [])))
    settings.validate()
    return settings
