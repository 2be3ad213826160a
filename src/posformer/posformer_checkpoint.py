"""posformer checkpoints: save and load a model as `config.json` + `model.safetensors`, written atomically."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors.torch import load_model, save_model

from posformer.config import Config
from posformer.model import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def save_pretrained(model: Transformer, out_dir: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write the model into `out_dir` (created if needed).

    Files are written into a temporary folder beside `out_dir` and moved into
    place one by one with `os.replace`, so a crash never leaves a half-written file.
    `extra_files` maps file names to text contents (a tokenizer, training state).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=out_dir))
    try:
        save_model(model, str(staging / WEIGHTS_FILE))
        (staging / CONFIG_FILE).write_text(json.dumps({"posformer": model.cfg.to_dict()}, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            (staging / name).write_text(text)
        for item in staging.iterdir():
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def load_pretrained(model_dir: str | Path, device: str | None = None) -> Transformer:
    """Load a model written by `save_pretrained`."""
    model_dir = Path(model_dir)
    config_path, weights_path = model_dir / CONFIG_FILE, model_dir / WEIGHTS_FILE
    for path in (config_path, weights_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: is {model_dir} a posformer checkpoint?")
    data = json.loads(config_path.read_text())
    if "posformer" not in data:
        raise ValueError(f"{config_path} is not a posformer config (no 'posformer' key); "
                         "a Hugging Face checkpoint is read with posformer.from_hf")
    model = Transformer(Config.from_dict(data["posformer"]))
    load_model(model, str(weights_path), strict=True, device=device or "cpu")
    return model
