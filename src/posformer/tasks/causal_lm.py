"""The default training task: a causal LM on the user's documents (the `posformer train` job).

It turns `RunSettings` into a tokenizer, token windows, a model and an evaluation
function, and hands them to the shared `Trainer`. The token stream is every document's
ids followed by the tokenizer's end-of-document id (`data.token_ids`), and the model's
`eos_token_id` is that id, so generation stops at the end of a document. With no
settings at all it is the ~2-minute demo on the shipped Tiny Shakespeare sample.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from posformer.config import Config
from posformer.data.documents import documents
from posformer.data.lm_tokenizers import build_tokenizer
from posformer.data.text import TokenStream
from posformer.data.token_ids import document_ids
from posformer.model import Transformer
from posformer.presets import preset_fields
from posformer.train import distributed
from posformer.train.batches import WindowBatches
from posformer.train.resume_check import trainer_policy
from posformer.train.rng import seed_everything
from posformer.train.settings import RunSettings
from posformer.train.trainer import FitResult, Trainer, check_output_dir
from posformer.utils.validation import is_int


def build_model(model_fields: dict, vocab_size: int, seq_len: int, eos_token_id: int | None = None) -> Transformer:
    """A decoder from Config fields (or `preset` + overrides), sized to the tokenizer and the training length;
    `eos_token_id` (the tokenizer's end-of-document id) replaces a preset's, not one `model_fields` gives."""
    fields = dict(model_fields)
    preset = fields.pop("preset", None)
    base = preset_fields(preset) if preset else {}
    if eos_token_id is not None:
        base["eos_token_id"] = eos_token_id
    merged = {**base, **fields, "vocab_size": vocab_size}
    given = merged.get("max_positions", 0)
    if is_int(given):  # anything else is Config's to refuse, by name
        merged["max_positions"] = max(given, seq_len)
    cfg = Config.from_dict(merged)
    if cfg.arch != "decoder":
        raise ValueError(f"model.arch={cfg.arch!r}: the causal-LM task trains a decoder")
    return Transformer(cfg)


def perplexity_evaluator(windows: torch.Tensor, batch_size: int):
    """The metric function: mean loss and perplexity over held-out windows (N, T)."""

    def evaluate(model) -> dict[str, float]:
        device = next(model.parameters()).device
        total = sum(
            float(model(chunk.to(device), labels=chunk.to(device), return_logits=False).loss) * len(chunk)
            for chunk in windows.split(batch_size)
        )
        loss = total / len(windows)
        return {"val_loss": loss, "val_ppl": math.exp(min(loss, 50.0))}

    return evaluate


def _quiet(message: str) -> None:
    """The log of ranks other than 0."""


def train_causal_lm(
    settings: RunSettings, output_dir: str, resume: bool = False, log=print, progress: bool = True
) -> FitResult:
    """Train the causal LM `settings` describes into `output_dir`; print a sample at the end.

    Under torchrun only rank 0 logs.
    """
    if not distributed.launched_as_main():
        log = _quiet
    settings.validate()
    check_output_dir(Path(output_dir))  # before reading the data: an unwritable path fails at once
    data, trainer_settings = settings.data, settings.trainer
    tokenizer = build_tokenizer(data.tokenizer, lambda: documents(data.train, data.text_field))
    vocab_size = tokenizer.vocab_size
    ids = document_ids(documents(data.train, data.text_field), tokenizer)
    if data.valid:
        valid_ids = document_ids(documents(data.valid, data.text_field), tokenizer)
    else:
        split = int((1 - data.valid_fraction) * len(ids))
        ids, valid_ids = ids[:split], ids[split:]
    windows = TokenStream(valid_ids).windows(data.seq_len)[
        : trainer_settings.eval_batches * trainer_settings.batch_size
    ]
    if len(windows) == 0:
        raise ValueError(f"the validation text has {len(valid_ids)} tokens, fewer than data.seq_len={data.seq_len}")
    seed_everything(trainer_settings.seed)  # the initial weights are a function of the seed
    model = build_model(settings.model, vocab_size, data.seq_len, eos_token_id=tokenizer.eod_id)
    log(f"data: {len(ids):,} training and {len(valid_ids):,} validation tokens, vocabulary {vocab_size}")
    log(
        f"model: {model.num_parameters():,} parameters, position={model.cfg.position}, d_model={model.cfg.d_model}, "
        f"{model.cfg.n_layers} layers; writing to {output_dir}"
    )
    resolved = {**settings.to_dict(), "model": model.cfg.to_dict()}  # every Config field, as built
    trainer = Trainer(
        model,
        WindowBatches(ids, data.seq_len, trainer_settings.seed),
        trainer_settings,
        output_dir,
        evaluate=perplexity_evaluator(windows, trainer_settings.batch_size),
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
