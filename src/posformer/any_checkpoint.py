"""Load any checkpoint posformer meets, whatever its kind, with its tokenizer.

The checkpoint modules are named after the kind of checkpoint they handle:
  posformer_checkpoint      a posformer model directory: config.json ("posformer" key) + model.safetensors
  hf.hf_checkpoint          a Hugging Face model directory (or Hub id): config.json + safetensors / .bin
  train.training_checkpoint a Trainer run's checkpoints/step-N/: a posformer checkpoint + trainer state
  any_checkpoint            (this module) whichever of them a directory holds; a run directory stands
                            for its newest valid training checkpoint
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Protocol

import torch

from posformer.data.text import CharTokenizer
from posformer.hf.api import from_hf, load_tokenizer
from posformer.hf.hf_checkpoint import resolve
from posformer.model import Transformer
from posformer.posformer_checkpoint import CONFIG_FILE, load_pretrained

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "spiece.model", "sentencepiece.bpe.model", "source.spm", "target.spm",
                   "added_tokens.json", "generation_config.json")


class TextTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HFTextTokenizer:
    """A `transformers` tokenizer seen as text <-> ids: special tokens added on encode, dropped on decode."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def is_posformer_checkpoint(directory: Path) -> bool:
    path = directory / CONFIG_FILE
    if not path.is_file():
        return False
    try:
        return "posformer" in json.loads(path.read_text())
    except json.JSONDecodeError:
        return False


def checkpoint_dir(directory: Path) -> Path:
    """A training run directory (no config.json, a checkpoints/ folder) stands for its newest valid checkpoint."""
    if (directory / CONFIG_FILE).is_file() or not (directory / "checkpoints").is_dir():
        return directory
    from posformer.train.training_checkpoint import CheckpointManager

    found = CheckpointManager(directory, keep_last=1, log=lambda message: None).latest_valid()
    if found is None:
        raise FileNotFoundError(f"{directory}/checkpoints holds no valid checkpoint")
    return found[0].path


def load_model(path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None,
               device: str | None = None) -> Transformer:
    """A posformer checkpoint (`save_pretrained`) or a Hugging Face one (`from_hf`), in eval mode."""
    directory = checkpoint_dir(resolve(path_or_hub_id))
    if is_posformer_checkpoint(directory):
        model = load_pretrained(directory, device=device).eval()
        return model.to(dtype) if dtype is not None else model
    return from_hf(directory, dtype=dtype, device=device)


def _is_char_tokenizer(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("type") == "char"
    except (json.JSONDecodeError, AttributeError, OSError):
        return False


def load_text_tokenizer(path_or_hub_id: str | os.PathLike) -> TextTokenizer:
    """The tokenizer stored beside a model: posformer's character tokenizer, or a Hugging Face one."""
    directory = checkpoint_dir(resolve(path_or_hub_id))
    char_file = directory / "tokenizer.json"
    if char_file.is_file() and _is_char_tokenizer(char_file):
        return CharTokenizer.load(char_file)
    return HFTextTokenizer(load_tokenizer(directory))


def copy_tokenizer_files(source: Path, out_dir: Path, hf_only: bool = False) -> list[str]:
    """Copy the tokenizer files of `source` into `out_dir`; `hf_only` skips posformer's character tokenizer."""
    copied = []
    for name in TOKENIZER_FILES:
        path = source / name
        if not path.is_file() or (hf_only and name == "tokenizer.json" and _is_char_tokenizer(path)):
            continue
        shutil.copyfile(path, out_dir / name)
        copied.append(name)
    return copied
