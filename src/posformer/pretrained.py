"""The Hugging Face way to save and load a model, on the model itself:

    model.save_pretrained("my-model", tokenizer=tok)    # config.json + model.safetensors (+ the tokenizer's files)
    model = Transformer.from_pretrained("runs/demo-lm") # as posformer.load: a run, a checkpoint, a model dir, HF
    model.config                                        # the Config (also `.cfg`)

Saving writes posformer's own format, which needs nothing above the model: this module writes it
(`write_pretrained`, also `checkpoints.native.save_pretrained`). Loading reads any checkpoint, Hugging Face's
included, so `from_pretrained` calls the one loader, `posformer.loading.load_model`, imported when it is called:
the model never depends on which modules were imported before it, and nothing patches the class.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_model
from torch import nn

from posformer.config.model_card import README, TrainingRun, model_card
from posformer.generation.generation_config import GENERATION_CONFIG_FILE
from posformer.utils.file_limits import not_blank
from posformer.utils.file_mode import with_umask_mode
from posformer.utils.safe_write import check_extra_files, make_dirs, write_text_atomic
from posformer.utils.tokenizer_config import make_portable

if TYPE_CHECKING:
    from posformer.config import Config
    from posformer.model import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # one of them is there when a tokenizer was saved
WEIGHTS_FILES = re.compile(  # every weights layout a loader reads: one file, or shards and their index
    r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)|(model\.safetensors|pytorch_model\.bin)\.index\.json"
)


def config_json(cfg: "Config") -> str:
    """The text of a posformer config.json: {"posformer": the Config's fields}."""
    return json.dumps({"posformer": cfg.to_dict()}, indent=2) + "\n"


def write_pretrained(
    model: nn.Module,
    out_dir: str | os.PathLike,
    extra_files: dict[str, str] | None = None,
    tokenizer: Any = None,
    run: TrainingRun | None = None,
) -> Path:
    """Write `model` (with its `cfg`) into `out_dir` (created if needed): config.json, model.safetensors and a
    model card, README.md (`model_card`: the config, the encoding, `run`'s data, steps and final metrics where
    given, and how to load it).

    Files are written into a new temporary folder inside `out_dir` and moved into place one by one with
    `os.replace`, so a crash never leaves a half-written file and a symlink at a file's name is replaced, never
    written through (`utils.safe_write`). `extra_files` maps file names to text contents (a tokenizer, training
    state), each a plain name of a file in `out_dir` other than the ones written here (a ValueError otherwise,
    before anything is written); `tokenizer` (with `save_pretrained(directory)`) writes its files there too, its
    tokenizer_config.json in the form transformers 4.x and 5.x both read (`utils.tokenizer_config`; one it cannot
    read is a ValueError naming it, and nothing is moved into `out_dir`). Weights of another layout left from an
    earlier save (shards and their index, a .bin) are removed, so the directory holds one.
    """
    check_extra_files(extra_files or {}, (CONFIG_FILE, WEIGHTS_FILE, GENERATION_CONFIG_FILE, README), "save_pretrained")
    out_dir = make_dirs(not_blank(out_dir, "save_pretrained: the output directory"))
    staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=out_dir))
    try:
        save_model(model, str(staging / WEIGHTS_FILE))
        with_umask_mode(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(config_json(model.cfg))
        generation = getattr(model, "generation_config", None)
        if generation is not None and not generation.is_empty():  # generate's defaults, in Hugging Face's format
            (staging / GENERATION_CONFIG_FILE).write_text(generation.to_json())
        for name, text in (extra_files or {}).items():
            write_text_atomic(staging / name, text, staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
        make_portable(staging)
        has_tokenizer = any((folder / name).is_file() for folder in (staging, out_dir) for name in TOKENIZER_FILES)
        card = model_card(
            model.cfg,
            out_dir.resolve().name,
            parameters=sum(p.numel() for p in model.parameters()),
            tokenizer=has_tokenizer,
            run=run,
        )
        (staging / README).write_text(card, encoding="utf-8")
        for item in staging.iterdir():
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    remove_other_weights(out_dir, WEIGHTS_FILE)
    return out_dir


def remove_other_weights(directory: Path, kept: str) -> list[str]:
    """Delete every weights file of `directory` but `kept` (stale shards, their index, a .bin of an earlier save:
    a loader would pick one of two layouts); a symlink is removed itself. Returns the names removed."""
    stale = sorted(p.name for p in directory.iterdir() if p.name != kept and WEIGHTS_FILES.fullmatch(p.name))
    for name in stale:
        if not (directory / name).is_dir() or (directory / name).is_symlink():
            (directory / name).unlink(missing_ok=True)
    return stale


class Pretrained:
    """`config`, `save_pretrained` and `from_pretrained` for `Transformer` (see the module docstring)."""

    cfg: "Config"

    @property
    def config(self) -> "Config":
        """The model's `Config` (the same object as `.cfg`)."""
        return self.cfg

    def save_pretrained(
        self, out_dir: str | os.PathLike, tokenizer: Any = None, run: TrainingRun | None = None
    ) -> Path:
        """Write config.json, model.safetensors and a model card (README.md) into `out_dir` (each file moved into
        place whole), and the tokenizer's files beside them when one is given (anything with
        `save_pretrained(directory)`: a `transformers` tokenizer, or posformer's own); `run`: the training run the
        card describes (`posformer.train.run_record.training_run`). `posformer.load` reads the directory back."""
        if tokenizer is not None and not callable(getattr(tokenizer, "save_pretrained", None)):
            raise TypeError(
                f"save_pretrained: tokenizer is a {type(tokenizer).__name__}; expected an object with "
                "save_pretrained(directory), such as a transformers tokenizer"
            )
        return write_pretrained(self, out_dir, tokenizer=tokenizer, run=run)

    @classmethod
    def from_pretrained(
        cls,
        path_or_hub_id: str | os.PathLike,
        dtype: torch.dtype | str | None = None,
        device: str | torch.device | None = None,
        *,
        torch_dtype: torch.dtype | str | None = None,
        device_map: str | None = None,
    ) -> "Transformer":
        """Any model posformer reads, in eval mode, as `posformer.load` (a training run, a checkpoint folder, a
        model dir, a Hugging Face dir or Hub id), with its loading options (dtype / torch_dtype, "auto" included;
        device / device_map)."""
        from posformer.loading import load_model  # the loader sits above the model: see the module docstring

        return load_model(path_or_hub_id, dtype, device, torch_dtype=torch_dtype, device_map=device_map)
