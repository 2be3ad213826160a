"""The default training task: a causal LM on plain-text files (the `posformer train` job).

It turns `RunSettings` into a tokenizer, token windows, a model and an evaluation
function, and hands them to the shared `Trainer`. With no settings at all it is
the ~2-minute demo on the shipped Tiny Shakespeare sample.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from posformer.config import Config
from posformer.data.text import ByteTokenizer, CharTokenizer, TokenStream, read_text
from posformer.loading import HFTextTokenizer
from posformer.model import Transformer
from posformer.presets import preset_fields
from posformer.train import distributed
from posformer.train.batches import WindowBatches
from posformer.train.resume_check import trainer_policy
from posformer.train.rng import seed_everything
from posformer.train.settings import DataSettings, RunSettings
from posformer.train.trainer import FitResult, Trainer, check_output_dir
from posformer.utils.validation import is_int


def build_tokenizer(data: DataSettings, train_text: str):
    """(tokenizer, vocab_size, files to save beside the model) for `data.tokenizer`.

    The files of "char" and "bytes" are Hugging Face tokenizer files (`AutoTokenizer` reads them with the same ids).
    """
    if data.tokenizer in ("char", "bytes"):
        tokenizer = CharTokenizer.from_text(train_text) if data.tokenizer == "char" else ByteTokenizer()
        return tokenizer, tokenizer.vocab_size, tokenizer.files()
    if not Path(data.tokenizer).is_dir():
        raise ValueError(
            f"data.tokenizer={data.tokenizer!r}: expected 'char', 'bytes' or a directory holding a "
            "Hugging Face tokenizer"
        )
    from posformer.hf import load_tokenizer

    hf = load_tokenizer(data.tokenizer)
    return HFTextTokenizer(hf), len(hf), {}


def build_model(model_fields: dict, vocab_size: int, seq_len: int) -> Transformer:
    """A decoder from Config fields (or `preset` + overrides), sized to the tokenizer and the training length."""
    fields = dict(model_fields)
    preset = fields.pop("preset", None)
    base = preset_fields(preset) if preset else {}
    merged = {**base, **fields, "vocab_size": vocab_size}
    given = merged.get("max_positions", 0)
    if is_int(given):  # anything else is Config's to refuse, by name
        merged["max_positions"] = max(given, seq_len)
    cfg = Config.from_dict(merged)
    if cfg.arch != "decoder":
        raise ValueError(f"model.arch={cfg.arch!r}: the causal-LM task trains a decoder")
    return Transformer(cfg)


def _ids(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor(tokenizer.encode(text), dtype=torch.long)


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
    texts = [read_text(p) for p in data.train]
    train_text = "\n".join(texts)
    tokenizer, vocab_size, files = build_tokenizer(data, train_text)
    ids = _ids(tokenizer, train_text)
    if data.valid:
        valid_ids = _ids(tokenizer, "\n".join(read_text(p) for p in data.valid))
    else:
        split = int((1 - data.valid_fraction) * len(ids))
        ids, valid_ids = ids[:split], ids[split:]
    windows = TokenStream(valid_ids).windows(data.seq_len)[
        : trainer_settings.eval_batches * trainer_settings.batch_size
    ]
    if len(windows) == 0:
        raise ValueError(f"the validation text has {len(valid_ids)} tokens, fewer than data.seq_len={data.seq_len}")
    seed_everything(trainer_settings.seed)  # the initial weights are a function of the seed
    model = build_model(settings.model, vocab_size, data.seq_len)
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
        extra_files=files,
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
