"""The default training task: a causal LM on the user's documents (the `posformer train` job).

It turns `RunSettings` into a tokenizer, token windows, a model and an evaluation
function, and hands them to the shared `Trainer`. The token stream is every document's
ids followed by the tokenizer's end-of-document id (`data.token_ids`), and the model's
`eos_token_id` is that id, so generation stops at the end of a document. With no
settings at all it is the ~2-minute demo on the shipped Tiny Shakespeare sample.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from posformer.config import Config
from posformer.data.documents import documents
from posformer.data.lm_tokenizers import build_tokenizer, special_ids
from posformer.data.packing import pack_documents
from posformer.data.text import TokenStream
from posformer.data.token_ids import document_ids, split_documents
from posformer.model import Transformer
from posformer.modules.heads import IGNORE_INDEX
from posformer.ops.masks import document_starts
from posformer.presets import preset_fields
from posformer.train import distributed
from posformer.train.batches import PackedBatches, WindowBatches, packed_batch
from posformer.train.precision import resolve_precision
from posformer.train.resume_check import trainer_policy
from posformer.train.rng import seed_everything
from posformer.train.run_lock import RunDirLock, check_output_dir
from posformer.train.settings import RunSettings
from posformer.train.trainer import FitResult, Trainer
from posformer.utils.file_limits import not_blank
from posformer.utils.validation import is_int


def build_model(
    model_fields: dict, vocab_size: int, seq_len: int, tokenizer_ids: dict[str, int | None] | None = None
) -> Transformer:
    """A decoder from Config fields (or `preset` + overrides), sized to the tokenizer and the training length;
    `tokenizer_ids` (the tokenizer's special ids, `lm_tokenizers.special_ids`: its end-of-document id as
    eos_token_id, its BOS id or None) replace a preset's, not those `model_fields` gives: a tokenizer without a BOS
    token leaves the model none (llama's preset bos_token_id=1 is an ordinary token of a trained BPE, "!")."""
    fields = dict(model_fields)
    preset = fields.pop("preset", None)
    base = preset_fields(preset) if preset else {}
    base.update(tokenizer_ids or {})
    merged = {**base, **fields, "vocab_size": vocab_size}
    given = merged.get("max_positions", 0)
    if is_int(given):  # anything else is Config's to refuse, by name
        merged["max_positions"] = max(given, seq_len)
    cfg = Config.from_dict(merged)
    if cfg.arch != "decoder":
        raise ValueError(f"model.arch={cfg.arch!r}: the causal-LM task trains a decoder")
    return Transformer(cfg)


def perplexity_evaluator(batches: list[dict[str, torch.Tensor]]):
    """The metric function: the mean loss over every predicted token of the held-out batches (windows, or rows of
    packed documents), and its perplexity."""

    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            predicted = _predicted_tokens(batch)
            total += float(model(**batch, return_logits=False).loss) * predicted
            count += predicted
        loss = total / count
        return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}

    return evaluate


def _predicted_tokens(batch: dict[str, torch.Tensor]) -> int:
    """How many tokens the batch's loss averages over: every label after a row's first that is not ignored and
    does not start a packed document."""
    counted = batch["labels"][:, 1:] != IGNORE_INDEX
    if "document_ids" in batch:
        counted &= ~document_starts(batch["document_ids"])[:, 1:]
    return int(counted.sum())


def held_out_batches(ids: torch.Tensor, eod_id: int, seq_len: int, rows: int, batch_size: int, packed: bool) -> list:
    """The evaluation batches: the first `rows` windows of seq_len tokens, or rows of the packed documents."""
    if packed:
        packing = pack_documents(split_documents(ids, eod_id), seq_len)
        first = torch.arange(min(rows, len(packing.input_ids)))
        return [packed_batch(packing, picked) for picked in first.split(batch_size)]
    windows = TokenStream(ids).windows(seq_len)[:rows]
    return [{"input_ids": w, "labels": w} for w in windows.split(batch_size)]


def _quiet(message: str) -> None:
    """The log of ranks other than 0."""


def train_causal_lm(
    settings: RunSettings, output_dir: str, resume: bool = False, log=print, progress: bool = True
) -> FitResult:
    """Train the causal LM `settings` describes into `output_dir`; print a sample at the end.

    Under torchrun only rank 0 logs. `output_dir` is held from before the data is read until the sample is
    printed (`RunDirLock`): another process writing it is refused by name.
    """
    settings.validate()
    not_blank(output_dir, "--output-dir")  # an empty path would stand for the current directory
    with RunDirLock(output_dir):
        return _train(settings, output_dir, resume, log, progress)


def _train(settings: RunSettings, output_dir: str, resume: bool, log, progress: bool) -> FitResult:
    if not distributed.launched_as_main():
        log = _quiet
    check_output_dir(Path(output_dir))  # before reading the data: an unwritable path fails at once
    data = settings.data
    device = distributed.resolve_device(settings.trainer.device)
    trainer_settings = dataclasses.replace(
        settings.trainer, precision=resolve_precision(settings.trainer.precision, device)
    )  # the run config records the precision used
    settings = dataclasses.replace(settings, trainer=trainer_settings)
    tokenizer = build_tokenizer(data.tokenizer, lambda: documents(data.train, data.text_field))
    vocab_size = tokenizer.vocab_size
    ids = document_ids(documents(data.train, data.text_field), tokenizer)
    if data.valid:
        valid_ids = document_ids(documents(data.valid, data.text_field), tokenizer)
    else:
        split = int((1 - data.valid_fraction) * len(ids))
        ids, valid_ids = ids[:split], ids[split:]
    rows, batch_size = trainer_settings.eval_batches * trainer_settings.batch_size, trainer_settings.batch_size
    held_out = held_out_batches(valid_ids, tokenizer.eod_id, data.seq_len, rows, batch_size, data.pack_documents)
    if not held_out:
        raise ValueError(f"the validation text has {len(valid_ids)} tokens, fewer than data.seq_len={data.seq_len}")
    if data.pack_documents:
        packing = pack_documents(split_documents(ids, tokenizer.eod_id), data.seq_len)
        batches = PackedBatches(packing, trainer_settings.seed)
        log(f"packed {len(packing.input_ids):,} rows of whole documents, {100 * packing.padding_share:.2f}% padding")
    else:
        batches = WindowBatches(ids, data.seq_len, trainer_settings.seed)
    seed_everything(trainer_settings.seed)  # the initial weights are a function of the seed
    model = build_model(settings.model, vocab_size, data.seq_len, special_ids(tokenizer))
    log(f"data: {len(ids):,} training and {len(valid_ids):,} validation tokens, vocabulary {vocab_size}")
    log(
        f"model: {model.num_parameters():,} parameters, position={model.cfg.position}, d_model={model.cfg.d_model}, "
        f"{model.cfg.n_layers} layers; writing to {output_dir}"
    )
    resolved = {**settings.to_dict(), "model": model.cfg.to_dict()}  # every Config field, as built
    trainer = Trainer(
        model,
        batches,
        trainer_settings,
        output_dir,
        evaluate=perplexity_evaluator(held_out),
        run_config=resolved,
        extra_files=tokenizer.files(),
        log=log,
        progress=progress,
        resume_policy=trainer_policy(),
    )
    result = trainer.fit(resume=resume)
    prompt = trainer_settings.sample_prompt
    sharded = distributed.is_sharded(model)  # FSDP: every rank must take part in each forward pass
    if prompt and (trainer.ctx.is_main or sharded) and trainer_settings.sample_tokens:
        try:
            prompt_ids = tokenizer.encode(prompt)
        except ValueError as err:
            log(f"no sample: the prompt {prompt!r} does not fit the tokenizer ({err})")
            return result
        model.eval()
        start = torch.tensor([prompt_ids], device=next(model.parameters()).device)
        out = model.generate(
            start,
            max_new_tokens=trainer_settings.sample_tokens,
            do_sample=True,
            temperature=0.8,
            top_k=20,
            generator=torch.Generator(start.device).manual_seed(trainer_settings.seed),
        )
        if trainer.ctx.is_main:
            log(f"\nsample after {result.step} steps:\n{tokenizer.decode(out[0].tolist())}\n")
    return result
