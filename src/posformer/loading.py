"""Load any checkpoint posformer meets, whatever its kind, with its tokenizer.

The checkpoint modules are named after the kind of checkpoint they handle:
  checkpoints.native        a posformer model directory: config.json ("posformer" key) + model.safetensors
  hf.hf_checkpoint          a Hugging Face model directory (or Hub id): config.json + safetensors / .bin
  train.training_checkpoint a Trainer run's checkpoints/step-N/: a posformer checkpoint + trainer state
  loading                   (this module) whichever of them a directory holds; a run directory stands
                            for its newest valid training checkpoint. It sits above hf/ and train/ and
                            below the commands; nothing under modules/, ops/, positions/ or checkpoints/
                            imports it.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Protocol

import torch

from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.checkpoints.native import CONFIG_FILE, load_pretrained, read_config
from posformer.config import Config
from posformer.data.text import CharTokenizer
from posformer.hf.api import config_from_hf_file, from_hf
from posformer.hf.api import load_tokenizer as hf_load_tokenizer
from posformer.hf.char_byte_tokenizers import char_tokenizer, stored_chars, tokenizer_files
from posformer.hf.hf_checkpoint import read_config as read_hf_config
from posformer.hf.hf_checkpoint import resolve
from posformer.model import Transformer

log = logging.getLogger(__name__)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "added_tokens.json",
    "generation_config.json",
)


class TextTokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HFTextTokenizer:
    """A `transformers` tokenizer seen as text <-> ids: special tokens added on encode, dropped on decode
    (posformer's byte-level tokenizer has none: its ids are the UTF-8 bytes, and decoding gives the text back)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def is_posformer_checkpoint(directory: Path) -> bool:
    """Whether `directory`'s config.json is a posformer one (a "posformer" key); False when it is absent or not
    a JSON object. A config.json that leads outside the directory is refused (`model_dir.model_file`)."""
    path = model_file(directory, CONFIG_FILE)
    if not path.is_file():
        return False
    try:
        return "posformer" in read_json(directory, CONFIG_FILE)
    except ValueError:
        return False


def checkpoint_dir(directory: Path) -> Path:
    """A training run directory (no config.json, a checkpoints/ folder) stands for its newest valid checkpoint.

    Every checkpoint is verified (manifest, trainer state, weights against config); one that fails is skipped
    with a warning naming it and the file that failed.
    """
    if model_file(directory, CONFIG_FILE).is_file() or not (directory / "checkpoints").is_dir():
        return directory
    from posformer.train.training_checkpoint import CheckpointManager

    model_file(directory, "checkpoints")
    found = CheckpointManager(directory, keep_last=1, log=log.warning).latest_valid()
    if found is None:
        raise FileNotFoundError(f"{directory}/checkpoints holds no valid checkpoint")
    return found[0].path


def load_model(
    path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None, device: str | None = None
) -> Transformer:
    """A posformer checkpoint (`save_pretrained`) or a Hugging Face one (`from_hf`), in eval mode: a model dir, a
    training run (its newest valid checkpoint), a checkpoint folder, or a Hugging Face dir or Hub id. Public as
    `posformer.load` and `Transformer.from_pretrained`.

    A directory with a manifest.json (a training checkpoint) is verified against it first; every file is
    read through `model_dir.model_file`.
    """
    directory = checkpoint_dir(resolve(path_or_hub_id))
    if is_posformer_checkpoint(directory):
        model = load_pretrained(directory, device=device).eval()
        return model.to(dtype) if dtype is not None else model
    return from_hf(directory, dtype=dtype, device=device)


def load_config(path_or_hub_id: str | os.PathLike) -> tuple[Config, Path]:
    """The `Config` of what `load_model` would load, and the directory it reads, without reading any weights: a
    posformer config.json, or a Hugging Face one mapped by its family (`from_hf`'s mapping)."""
    directory = checkpoint_dir(resolve(path_or_hub_id))
    if is_posformer_checkpoint(directory):
        return read_config(directory), directory
    cfg, _ = config_from_hf_file(read_hf_config(directory), str(directory))
    return cfg, directory


def load_tokenizer(path_or_hub_id: str | os.PathLike):
    """The tokenizer beside any model `load_model` takes (a run dir stands for its newest valid checkpoint), as a
    `transformers` fast tokenizer (`hf.api.load_tokenizer`: every tokenizer posformer writes, and Hugging Face's).
    Public as `posformer.load_tokenizer`."""
    return hf_load_tokenizer(checkpoint_dir(resolve(path_or_hub_id)))


def load_text_tokenizer(path_or_hub_id: str | os.PathLike) -> TextTokenizer:
    """The tokenizer stored beside a model: posformer's character tokenizer (either file form, see
    `hf.char_byte_tokenizers`; a character outside its vocabulary is an error), or a Hugging Face one."""
    directory = checkpoint_dir(resolve(path_or_hub_id))
    found = stored_chars(directory)
    if found is not None:
        return CharTokenizer(found.chars, eod=found.eod)
    return HFTextTokenizer(hf_load_tokenizer(directory))


def tokenizer_paths(source: Path) -> dict[str, Path]:
    """The tokenizer files `source` holds (name -> path), each through `model_dir.model_file` (a symlink to a
    file outside `source` is refused) and, where `source` holds a manifest, checked against it."""
    paths = {name: model_file(source, name) for name in TOKENIZER_FILES}
    present = {name: path for name, path in paths.items() if path.is_file()}
    verify_if_present(source, only=list(present))
    return present


def copy_tokenizer_files(source: Path, out_dir: Path, hf_only: bool = False) -> list[str]:
    """Copy the tokenizer files of `source` into `out_dir`; returns their names.

    `hf_only`: every file written is one Hugging Face reads: the `{"type": "char"}` tokenizer.json of a run
    trained before posformer wrote Hugging Face files is written in that form instead (tokenizer.json and
    tokenizer_config.json, the same ids). Each file is read through `tokenizer_paths`: a symlink to a file outside
    `source` is refused, never copied.
    """
    paths = tokenizer_paths(source)
    found = stored_chars(source) if hf_only else None
    written = tokenizer_files(char_tokenizer(found.chars)) if found is not None and found.legacy else {}
    for name, text in written.items():
        (out_dir / name).write_text(text, encoding="utf-8")
    for name, path in paths.items():
        if name not in written:
            shutil.copyfile(path, out_dir / name)
    return list(written) + [name for name in paths if name not in written]


Transformer.loader = staticmethod(load_model)  # `Transformer.from_pretrained` (see `posformer.pretrained`)
