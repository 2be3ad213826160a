"""The one loader: any checkpoint posformer meets, whatever its kind, with its tokenizer.

The checkpoint modules are named after the kind of checkpoint they handle:
  checkpoints.native        a posformer model directory: config.json ("posformer" key) + model.safetensors
  hf.hf_checkpoint          a Hugging Face model directory (or Hub id, `org/name`): config.json + safetensors / .bin
  train.training_checkpoint a Trainer run's checkpoints/step-N/: a posformer checkpoint + trainer state
  loading                   (this module) whichever of them a directory holds; a run directory stands for its
                            newest checkpoint whose model checks out. It sits above hf/ and train/ and below the
                            tasks and commands, which all load through it; nothing under modules/, ops/,
                            positions/ or checkpoints/ imports it (`Transformer.from_pretrained` calls it).

A folder holding a manifest.json is checked against it, each file hashed once: every file it lists when the
folder is named itself, the model's files (config.json, model.safetensors) when a run directory stands for it,
so loading weights from a run never reads its optimizer state (`--resume` checks that).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

import torch

from posformer.checkpoints.manifest import MANIFEST, CorruptCheckpoint, has_manifest, verify_if_present
from posformer.checkpoints.model_dir import model_file, read_json
from posformer.checkpoints.native import CONFIG_FILE, WEIGHTS_FILE, check_checkpoint, load_pretrained, read_config
from posformer.config import Config
from posformer.data.text import CharTokenizer
from posformer.hf.api import config_from_hf_file, from_hf
from posformer.hf.api import load_tokenizer as hf_load_tokenizer
from posformer.hf.char_byte_tokenizers import char_tokenizer, stored_chars, tokenizer_files
from posformer.hf.hf_checkpoint import read_config as read_hf_config
from posformer.hf.hf_checkpoint import resolve
from posformer.loading_options import DtypeLike, requested_device, requested_dtype, saved_dtype
from posformer.model import Transformer
from posformer.utils.file_limits import TOKENIZER, check_size
from posformer.utils.safe_write import replacing, write_text_atomic
from posformer.utils.tokenizer_config import TOKENIZER_CONFIG, portable_tokenizer_config
from posformer.utils.user_files import read_text_file

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)
T = TypeVar("T")
MODEL_FILES = (CONFIG_FILE, WEIGHTS_FILE)
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

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text)["input_ids"]
        return ids

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


def run_checkpoints(directory: Path) -> list[Path] | None:
    """The checkpoint folders of a training run directory (no config.json, a checkpoints/ folder), newest first;
    None when `directory` is no run directory. A checkpoints/ folder that leads outside the run is refused."""
    if model_file(directory, CONFIG_FILE).is_file() or not (directory / "checkpoints").is_dir():
        return None
    from posformer.train.training_checkpoint import CheckpointManager

    model_file(directory, "checkpoints")
    return [found.path for found in CheckpointManager(directory, keep_last=1).checkpoints()]


def _newest(directory: Path, read: Callable[[Path, bool], T]) -> tuple[T, Path]:
    """(read(folder, whole), folder): `directory` itself (whole: True), or for a run directory its newest
    checkpoint that has a manifest and that `read` accepts (whole: False); one that fails, or leads outside the
    run, is skipped with a warning naming it and why."""
    folders = run_checkpoints(directory)
    if folders is None:
        return read(directory, True), directory
    for folder in folders:
        try:
            model_file(folder.parent, folder.name)
            if not has_manifest(folder):
                raise CorruptCheckpoint(f"{folder}: no {MANIFEST} (the write did not finish)")
            return read(folder, False), folder
        except (OSError, ValueError) as err:  # CorruptCheckpoint is a ValueError
            log.warning(f"checkpoint {folder} is unusable ({err}); falling back to the previous one")
    raise FileNotFoundError(f"{directory}/checkpoints holds no valid checkpoint")


def checkpoint_dir(directory: Path, files: tuple[str, ...] = MODEL_FILES) -> Path:
    """The folder read for `directory`: itself, or for a training run directory its newest checkpoint whose
    `files` (those it holds) check out against its manifest, each hashed once; by default the model's, whose
    weights' names and shapes are checked against its config too (what `load_model` reads). One that fails is
    skipped with a warning naming it and the file that failed. The tokenizer and the config of a run are the same
    in each of its checkpoints (`--resume` refuses to change them), so they are read from the newest whose own
    files check out."""

    def check(folder: Path, whole: bool) -> None:
        verify_if_present(folder, only=files)
        if WEIGHTS_FILE in files and is_posformer_checkpoint(folder):
            check_checkpoint(folder)

    if run_checkpoints(directory) is None:
        return directory
    return _newest(directory, check)[1]


def load_from(
    path_or_hub_id: str | os.PathLike[str],
    dtype: torch.dtype | None = None,
    device: str | None = None,
    changes: dict[str, Any] | None = None,
    head: str | None = None,
    kind: str | None = None,
) -> tuple[Transformer, Path]:
    """(model in eval mode, the folder it was read from) for `load_model`'s sources. changes: `Config` fields set
    before the model is built, once (`native.load_pretrained`, `from_hf`); head: a new head for a Hugging Face
    checkpoint (`from_hf`); kind: "posformer" or "hf" reads only checkpoints of that kind (the other is refused,
    saying why), None either."""

    def read(folder: Path, whole: bool) -> Transformer:
        config = None if kind == "hf" else _config_json(folder)
        posformer = config is not None and "posformer" in config
        if kind != "hf" and (posformer or not whole or kind == "posformer"):  # a run's checkpoint is posformer's
            checked = None if whole else MODEL_FILES
            config = config if posformer else None
            return load_pretrained(folder, device=device, changes=changes, checked=checked, config=config)
        return from_hf(folder, dtype=dtype, device=device, head=head, changes=changes)

    model, folder = _newest(resolve(path_or_hub_id), read)
    model = model.eval()
    return (model.to(dtype) if dtype is not None else model), folder


def load_model(
    path_or_hub_id: str | os.PathLike[str],
    dtype: DtypeLike = None,
    device: str | torch.device | None = None,
    *,
    torch_dtype: DtypeLike = None,
    device_map: str | None = None,
) -> Transformer:
    """A posformer checkpoint (`save_pretrained`) or a Hugging Face one (`from_hf`), in eval mode: a model dir, a
    training run (its newest checkpoint whose model checks out), a checkpoint folder, or a Hugging Face dir or Hub
    id (`org/name`; a path that exists nowhere else is never looked up). Public as `posformer.load` and
    `Transformer.from_pretrained`. Each file is read through `model_dir.model_file`, and checked against the
    folder's manifest where it has one (see the module docstring).

    dtype (or torch_dtype): a floating torch dtype, its name ("bfloat16"), or "auto", the dtype the weights were
    saved in; default float32. device (or device_map): "cpu", "cuda", "cuda:N" or "auto" (`loading_options`)."""
    wanted, where = requested_dtype(dtype, torch_dtype), requested_device(device, device_map)
    model, folder = load_from(path_or_hub_id, dtype=wanted if isinstance(wanted, torch.dtype) else None, device=where)
    return model.to(saved_dtype(folder)) if wanted == "auto" else model


def _config_json(folder: Path) -> dict[str, Any] | None:
    """The JSON object of `folder`'s config.json; None when it is absent or not one (`from_hf` then says why)."""
    if not model_file(folder, CONFIG_FILE).is_file():
        return None
    try:
        return read_json(folder, CONFIG_FILE)
    except ValueError:
        return None


def load_config(path_or_hub_id: str | os.PathLike[str]) -> tuple[Config, Path]:
    """The `Config` of what `load_model` would load, and the directory it reads, without reading any weights: a
    posformer config.json, or a Hugging Face one mapped by its family (`from_hf`'s mapping)."""
    directory = checkpoint_dir(resolve(path_or_hub_id), (CONFIG_FILE,))
    if is_posformer_checkpoint(directory):
        return read_config(directory), directory
    cfg, _ = config_from_hf_file(read_hf_config(directory), str(directory / CONFIG_FILE))
    return cfg, directory


def load_tokenizer(path_or_hub_id: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The tokenizer beside any model `load_model` takes (a run dir stands for its newest checkpoint whose
    tokenizer files check out), as a `transformers` fast tokenizer (`hf.api.load_tokenizer`: every tokenizer
    posformer writes, and Hugging Face's). Public as `posformer.load_tokenizer`."""
    return hf_load_tokenizer(checkpoint_dir(resolve(path_or_hub_id), TOKENIZER_FILES))


def load_text_tokenizer(path_or_hub_id: str | os.PathLike[str]) -> TextTokenizer:
    """The tokenizer stored beside a model: posformer's character tokenizer (either file form, see
    `hf.char_byte_tokenizers`; a character outside its vocabulary is an error), or a Hugging Face one."""
    directory = checkpoint_dir(resolve(path_or_hub_id), TOKENIZER_FILES)
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
    `source` is refused, never copied. A tokenizer_config.json is written in the form transformers 4.x and 5.x
    both read (`utils.tokenizer_config`: 5.x's `TokenizersBackend` as `PreTrainedTokenizerFast`); one that is not
    a JSON object is a ValueError naming it. Every file's size is checked against a tokenizer file's limit before
    any is read or written.
    """
    paths = tokenizer_paths(source)
    for path in paths.values():
        check_size(path, str(path), TOKENIZER)
    found = stored_chars(source) if hf_only else None
    written = tokenizer_files(char_tokenizer(found.chars)) if found is not None and found.legacy else {}
    if TOKENIZER_CONFIG in paths and TOKENIZER_CONFIG not in written:
        text = read_text_file(paths[TOKENIZER_CONFIG], "tokenizer config", TOKENIZER)
        written[TOKENIZER_CONFIG] = portable_tokenizer_config(text, str(paths[TOKENIZER_CONFIG]))
    for name, text in written.items():
        write_text_atomic(out_dir / name, text)
    for name, path in paths.items():
        if name not in written:
            with replacing(out_dir / name) as tmp:  # a symlink at the name is replaced, never written through
                shutil.copyfile(path, tmp)
    return list(written) + [name for name in paths if name not in written]
