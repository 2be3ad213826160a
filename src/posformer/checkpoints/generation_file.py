"""generation_config.json in a model directory, read through the directory boundary (`model_dir`) into the
`GenerationConfig` that gives `generate` its defaults. Written by `pretrained.write_pretrained` and `hf.to_hf`."""

from __future__ import annotations

import logging
import os

from posformer.checkpoints.model_dir import model_file, read_json
from posformer.generation.generation_config import GENERATION_CONFIG_FILE, GenerationConfig

log = logging.getLogger(__name__)


def read_generation_config(directory: str | os.PathLike) -> GenerationConfig:
    """The generation config of `directory` (an empty one when it has no generation_config.json).

    A file that is not a JSON object of settings of the right kinds is a ValueError naming it; a file linking outside
    the directory is refused (`model_dir.model_file`). Settings of Hugging Face's that posformer does not implement
    are kept (and written back on save) and named in a warning when they would change the tokens."""
    path = model_file(directory, GENERATION_CONFIG_FILE)
    if not path.is_file():
        return GenerationConfig()
    config = GenerationConfig.from_dict(read_json(directory, GENERATION_CONFIG_FILE), str(path))
    unused = config.unused_settings()
    if unused:
        log.warning(
            "%s: posformer's generate does not implement %s; they are kept in the model's generation_config and "
            "ignored, so its tokens may differ from transformers' there",
            path,
            ", ".join(f"{k}={v!r}" for k, v in unused.items()),
        )
    return config
