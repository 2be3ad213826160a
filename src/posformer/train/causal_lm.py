"""Train a small causal language model on a plain-text corpus (the `posformer train` job)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from posformer.checkpoint import save_pretrained
from posformer.config import Config
from posformer.data.text import CharTokenizer, TokenStream, default_corpus, read_text
from posformer.model import Transformer


@dataclass
class TrainSettings:
    """Everything `train_causal_lm` needs; the CLI fills it from its flags."""

    corpus: str = field(default_factory=lambda: str(default_corpus()))
    out_dir: str = "runs/demo"
    model: dict = field(default_factory=lambda: dict(
        arch="decoder", d_model=128, n_layers=4, n_heads=4, d_ff=352, position="rope",
        norm="rmsnorm", norm_placement="pre", activation="swiglu", qkv_bias=False, attn_out_bias=False,
        ffn_bias=False, tie_embeddings=True, max_positions=128,
    ))
    seq_len: int = 128
    batch_size: int = 32
    steps: int = 500
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.1
    eval_every: int = 100
    eval_batches: int = 8
    seed: int = 0
    max_minutes: float | None = None
    prompt: str = "ROMEO:\n"
    sample_tokens: int = 200


def learning_rate(step: int, settings: TrainSettings) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def evaluate(model: Transformer, windows: torch.Tensor, batch_size: int) -> float:
    """Mean causal-LM loss over windows (N, T)."""
    model.eval()
    losses = [model(chunk, labels=chunk).loss.item() for chunk in windows.split(batch_size)]
    model.train()
    return sum(losses) / len(losses)


def train_causal_lm(settings: TrainSettings, log=print) -> dict:
    """Train, evaluate, save and sample. Returns the metrics that were also written to `metrics.json`.

    The checkpoint is saved atomically at every evaluation, at the end, and on
    Ctrl-C, so an interrupted run keeps its latest weights.
    """
    torch.manual_seed(settings.seed)
    text = read_text(settings.corpus)
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    split = int(0.9 * len(ids))
    train, valid = TokenStream(ids[:split]), TokenStream(ids[split:])
    eval_windows = valid.windows(settings.seq_len)[: settings.eval_batches * settings.batch_size]
    if len(eval_windows) == 0:
        raise ValueError(f"{settings.corpus}: the validation tenth is shorter than seq_len={settings.seq_len}")
    cfg = Config(**{**settings.model, "vocab_size": tokenizer.vocab_size,
                    "max_positions": max(settings.model.get("max_positions", 0), settings.seq_len)})
    model = Transformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.95),
                                  weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(settings.seed)
    out_dir = Path(settings.out_dir)
    log(f"corpus {settings.corpus}: {len(ids):,} characters, vocabulary {tokenizer.vocab_size}")
    log(f"model: {cfg.arch}, {model.num_parameters():,} parameters, position={cfg.position}, "
        f"d_model={cfg.d_model}, {cfg.n_layers} layers; writing to {out_dir}")
    history: list[dict] = []

    def checkpoint(step: int) -> None:
        metrics = {"step": step, "history": history, "settings": asdict(settings)}
        save_pretrained(model, out_dir, {"tokenizer.json": json.dumps({"type": "char", "chars": tokenizer.chars}),
                                         "metrics.json": json.dumps(metrics, indent=2)})

    start, step, running = time.monotonic(), 0, None
    bar = tqdm(range(settings.steps), desc="training", unit="step", dynamic_ncols=True)
    try:
        for step in bar:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, settings)
            batch = train.batch(settings.batch_size, settings.seq_len, generator)
            loss = model(batch, labels=batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
            bar.set_postfix(loss=f"{running:.3f}")
            last = step == settings.steps - 1
            out_of_time = settings.max_minutes is not None and time.monotonic() - start > 60 * settings.max_minutes
            if (step + 1) % settings.eval_every == 0 or last or out_of_time:
                val = evaluate(model, eval_windows, settings.batch_size)
                history.append({"step": step + 1, "train_loss": round(running, 4), "val_loss": round(val, 4),
                                "seconds": round(time.monotonic() - start, 1)})
                bar.write(f"step {step + 1:5d}  train loss {running:.3f}  val loss {val:.3f}")
                checkpoint(step + 1)
            if out_of_time:
                bar.write(f"stopping after {settings.max_minutes} minutes (--max-minutes)")
                break
    except KeyboardInterrupt:
        bar.write(f"interrupted at step {step}: saving the checkpoint to {out_dir}")
        checkpoint(step)
        raise
    finally:
        bar.close()
    model.eval()
    prompt = torch.tensor([tokenizer.encode(settings.prompt)])
    sample = model.generate(prompt, max_new_tokens=settings.sample_tokens, do_sample=True, temperature=0.8,
                            top_k=20, generator=torch.Generator().manual_seed(settings.seed))
    text_out = tokenizer.decode(sample[0].tolist())
    log(f"\nsample after {history[-1]['step']} steps:\n{text_out}\n")
    log(f"saved {out_dir}/ (config.json, model.safetensors, tokenizer.json, metrics.json)")
    return {"history": history, "sample": text_out}
