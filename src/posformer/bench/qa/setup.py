"""What the extractive-QA benchmark gives both sides alike: the questions, the batches and the two models.

Both models load one checkpoint (all-MiniLM-L6-v2 by default) whose config.json is rewritten
with every dropout probability 0, and get the same freshly drawn span head; both are fed the
same pre-drawn batches of the same tokenized windows.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor, nn

from posformer.checkpoints.model_dir import read_json
from posformer.data.shared import default_data_dir, fetch_hint, squad_v2_dev
from posformer.data.squad import QAExample, load_qa_file, split_by_article, squad_sample
from posformer.tasks.qa.feature_batches import FeatureBatches
from posformer.tasks.qa.job_data import EVAL_FRACTION, SPLIT_SEED  # the split of `qa train --train-file`

DEFAULT_DATA = squad_v2_dev()
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0}


def resolve_data(path: str | Path | None) -> tuple[Path, str | None]:
    """(the SQuAD file to read, a note when the default file is missing and the shipped sample is used)."""
    if path is not None:
        if not Path(path).is_file():
            raise ValueError(f"--data {path}: no such file")
        return Path(path), None
    if DEFAULT_DATA.is_file():
        return DEFAULT_DATA, None
    hint = fetch_hint("squad_v2", default_data_dir())
    return squad_sample(), f"{DEFAULT_DATA} not found: using the shipped sample {squad_sample()} ({hint})"


def _sample(examples: list[QAExample], limit: int, seed: int) -> list[QAExample]:
    """At most `limit` of `examples` (0: all), drawn with `seed`, in their original order."""
    if limit == 0 or limit >= len(examples):
        return examples
    keep = set(random.Random(seed).sample(range(len(examples)), limit))
    return [e for i, e in enumerate(examples) if i in keep]


def load_questions(
    path: Path, train_questions: int, eval_questions: int, seed: int
) -> tuple[list[QAExample], list[QAExample]]:
    """(train, eval) questions from article-disjoint parts of `path` (`split_by_article`, 20% of the articles
    held out), each capped by a seeded sample. Training drops answers not found in their context; evaluation
    keeps every gold text, as the official metric reads them."""
    train = split_by_article(load_qa_file(path).examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)[0]
    held = split_by_article(
        load_qa_file(path, for_training=False).examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED
    )[1]
    return _sample(train, train_questions, seed), _sample(held, eval_questions, seed)


def draw_batches(features: dict[str, Tensor], steps: int, batch_size: int, seed: int) -> list[dict[str, Tensor]]:
    """`steps` batches of `batch_size` rows (`FeatureBatches` order), each cut to its longest row.

    Every tensor is (batch_size, longest attention_mask row) or (batch_size,) for the positions.
    Gold positions lie inside the kept tokens, so the cut changes no label.
    """
    source = FeatureBatches(features, seed)
    return [source.next_batch(batch_size) for _ in range(steps)]


@contextmanager
def quiet_loggers(*names: str) -> Iterator[None]:
    """The loggers `names` print only errors inside the block (their levels restored after it)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@contextmanager
def checkpoint_without_dropout(directory: Path) -> Iterator[Path]:
    """A temporary copy of checkpoint `directory` whose config.json sets every dropout probability to 0. Files are
    hard-linked where the file system allows (else copied): a symlink out of the folder would cross the model
    directory's boundary (`posformer.checkpoints.model_dir`)."""
    with tempfile.TemporaryDirectory(prefix="posformer-bench-qa-") as tmp:
        for item in directory.iterdir():
            if item.name != "config.json" and item.is_file():
                try:
                    os.link(item.resolve(), Path(tmp) / item.name)
                except OSError:
                    shutil.copyfile(item, Path(tmp) / item.name)
        config: dict[str, Any] = read_json(directory, "config.json")
        (Path(tmp) / "config.json").write_text(json.dumps({**config, **NO_DROPOUT}, indent=2))
        yield Path(tmp)


def span_head_init(d_model: int, std: float, seed: int) -> tuple[Tensor, Tensor]:
    """The shared initial span head: weight (2, d_model) from N(0, std) with `seed`, bias (2,) zeros.
    Row 0 gives the start logits, row 1 the end logits, in both libraries."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, d_model, generator=g) * std, torch.zeros(2)


@torch.no_grad()
def set_linear(linear: nn.Linear, weight: Tensor, bias: Tensor) -> None:
    linear.weight.copy_(weight)
    linear.bias.copy_(bias)


def load_models(directory: Path, seed: int) -> tuple[nn.Module, nn.Module]:
    """(posformer `from_hf(dir, head="span_qa")`, `BertForQuestionAnswering.from_pretrained(dir)` in a
    `PaddingMaskedSpanLoss`), float32, dropout 0, with identical span heads (N(0, initializer_range) weights
    drawn with `seed`, zero biases)."""
    import transformers

    from posformer.hf import from_hf

    # "the span head is newly initialised": it is overwritten below
    with (
        quiet_loggers("posformer.hf.api", "transformers.modeling_utils"),
        checkpoint_without_dropout(directory) as plain,
    ):
        ours = from_hf(plain, head="span_qa").float()
        theirs = transformers.BertForQuestionAnswering.from_pretrained(plain, torch_dtype=torch.float32)
    std = theirs.config.initializer_range
    weight, bias = span_head_init(theirs.config.hidden_size, std, seed)
    set_linear(ours.head.proj, weight, bias)
    set_linear(theirs.qa_outputs, weight, bias)
    return ours, PaddingMaskedSpanLoss(theirs)


class PaddingMaskedSpanLoss(nn.Module):
    """A Hugging Face span model trained on posformer's span loss, which leaves padded positions out.

    `BertForQuestionAnswering` takes its softmax over every position of the batch, padding included, so a
    window's loss depends on the longest window it was batched with; posformer's span head gives padded
    positions the lowest logit (`modules.head_outputs.apply_head`), so they never take probability mass. Both
    sides of the benchmark train on that one loss; the network, its weights and its speed are HF's.
    Calls without answer positions (prediction) return HF's output unchanged.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    @property
    def config(self) -> Any:
        return self.model.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
    ) -> Any:
        """input_ids, attention_mask, token_type_ids: (B, T); start/end positions (B,) -> HF's output, its
        `loss` that of posformer's span head."""
        from posformer.modules.heads import mask_padded_logits, span_loss

        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if start_positions is not None and end_positions is not None:
            out.loss = span_loss(
                mask_padded_logits(out.start_logits, attention_mask),
                mask_padded_logits(out.end_logits, attention_mask),
                start_positions,
                end_positions,
            )
        return out


def summary(questions: Sequence[QAExample]) -> dict[str, int]:
    """Question counts: total, answerable, unanswerable."""
    answerable = sum(1 for q in questions if q.answers)
    return {"questions": len(questions), "answerable": answerable, "unanswerable": len(questions) - answerable}
