"""`from_hf`, `to_hf` and `load_tokenizer`: Hugging Face checkpoints in and out of posformer."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from posformer.hf.family import UnsupportedCheckpoint, family_for, supported
from posformer.hf.files import CONFIG, read_config, read_state, resolve, write_checkpoint
from posformer.hf.mapping import export_state, import_state
from posformer.model import Transformer


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    """Allocate new floating tensors in `dtype` (so a bf16 model is never built in float32 first)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def from_hf(path_or_hub_id: str | os.PathLike, dtype: torch.dtype | None = None,
            device: str | torch.device | None = None) -> Transformer:
    """Load a Hugging Face checkpoint (a local directory, or a Hub id when online) as a `Transformer`.

    The config is mapped to a `posformer.Config` and the weights onto posformer's modules.
    dtype: the parameters' dtype (default float32, as `transformers` does); device: where they live.
    Raises `UnsupportedCheckpoint` for a model_type or a feature posformer does not implement,
    `CheckpointError` for a missing, truncated or corrupt file, and `WeightMapError` listing
    every missing, unknown and mis-shaped tensor.
    """
    directory = resolve(path_or_hub_id)
    hf_config = read_config(directory)
    family = family_for(hf_config.get("model_type"), str(directory / CONFIG))
    cfg = family.config_from_hf(hf_config)
    state = read_state(directory)
    dtype = dtype or torch.float32
    if not dtype.is_floating_point:
        raise ValueError(f"from_hf: dtype must be a floating-point dtype, got {dtype}")
    with _default_dtype(dtype):
        model = Transformer(cfg)
    state = family.prepare_state(cfg, hf_config, state)
    import_state(model, family.rules(cfg), state, str(directory), family.ignore(cfg))
    return model.to(device=device).eval()


def to_hf(model: Transformer, out_dir: str | os.PathLike) -> Path:
    """Write `model` as a Hugging Face checkpoint (`config.json` + `model.safetensors`) into `out_dir`.

    The family is `model.cfg.hf_model_type` (set by `from_hf` and by the presets).
    `transformers`' `from_pretrained` then loads it and gives the same logits.
    """
    cfg = model.cfg
    if cfg.hf_model_type is None:
        raise UnsupportedCheckpoint(
            "to_hf: Config.hf_model_type is None, so the Hugging Face family to write is unknown; "
            f"set it to one of: {', '.join(supported())}"
        )
    family = family_for(cfg.hf_model_type, "to_hf")
    hf_config = family.config_to_hf(cfg)
    hf_config.setdefault("torch_dtype", str(next(model.parameters()).dtype).removeprefix("torch."))
    state = export_state(model, family.rules(cfg))
    family.finish_export(model, hf_config, state)
    return write_checkpoint(out_dir, hf_config, state)


def load_tokenizer(path_or_hub_id: str | os.PathLike):
    """The tokenizer stored in a checkpoint directory, as a `transformers` fast tokenizer.

    Reads `tokenizer.json` (or the slow files transformers converts, such as
    T5's `spiece.model`) with `AutoTokenizer`; a Hub id is downloaded when online.
    """
    directory = resolve(path_or_hub_id)
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ImportError("load_tokenizer needs the `transformers` package: pip install transformers") from err
    try:
        return AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError) as err:
        raise ValueError(f"no usable tokenizer in {directory}: {err}") from err
