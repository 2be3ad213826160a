"""A byte-level BPE from `posformer tokenizer train` (no BOS token) and a tiny packed llama-preset run trained with it.

The llama preset's bos_token_id is 1, an ordinary token of such a BPE: the run's model must carry none.
"""

from __future__ import annotations

import json
from pathlib import Path

from posformer.cli import main
from posformer.data.text import default_corpus, read_text
from train_helpers import write_config

VOCAB = 320
STEPS = 4


def write_documents(path: Path, count: int = 60) -> Path:
    """`count` paragraphs of the shipped sample as a .jsonl file of documents."""
    paragraphs = [p for p in read_text(default_corpus())[:40_000].split("\n\n") if p.strip()][:count]
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs), encoding="utf-8")
    return path


def train_bpe(documents: Path, out: Path) -> Path:
    assert main(["tokenizer", "train", "--data", str(documents), "--vocab-size", str(VOCAB), "--out", str(out)]) == 0
    return out


def train_run(documents: Path, tokenizer: Path, out: Path) -> Path:
    """A run of `STEPS` steps (evaluated at steps 2 and 4) of a one-layer llama-preset decoder on packed documents."""
    config = {
        "model": {"preset": "llama", "d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_positions": 64},
        "data": {"train": [str(documents)], "tokenizer": str(tokenizer), "seq_len": 32, "pack_documents": True},
        "trainer": {
            "steps": STEPS,
            "batch_size": 2,
            "eval_every": 2,
            "eval_batches": 1,
            "sample_tokens": 0,
            "device": "cpu",
        },
    }
    path = write_config(out.parent / f"{out.name}.yaml", config)
    assert main(["train", "--config", str(path), "--output-dir", str(out), "--no-progress"]) == 0
    return out


def bpe_and_run(root: Path) -> tuple[Path, Path]:
    """(tokenizer dir, run dir) under `root`."""
    documents = write_documents(root / "documents.jsonl")
    tokenizer = train_bpe(documents, root / "bpe")
    return tokenizer, train_run(documents, tokenizer, root / "run")
