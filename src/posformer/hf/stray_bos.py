"""A bos_token_id that the model's own tokenizer does not have: left out of an export.

    if stray_bos(model.cfg, folder):      # the tokenizer stored in `folder` has no BOS, and the id is no special token
        cfg = cfg.replace(bos_token_id=None)

A causal-LM run takes its eos_token_id from its tokenizer (the end-of-document id) and, since the special ids are
taken from the tokenizer, its bos_token_id too (`tasks.causal_lm.build_model`); runs trained before that kept a
preset's (llama: 1), which in a BPE of `posformer tokenizer train` is the ordinary token "!". An id is stray when the
tokenizer declares no BOS token and the id is none of its special tokens: Qwen2's bos_token_id (151643, its
`<|endoftext|>`, while its tokenizer names no bos_token) is kept.
"""

from __future__ import annotations

from pathlib import Path

from posformer.config import Config
from posformer.hf.api import load_tokenizer
from posformer.hf.tokenizer_files import has_vocabulary


def stray_bos(cfg: Config, folder: Path) -> bool:
    """Whether `cfg.bos_token_id` is set while the tokenizer stored in `folder` has no BOS token and no special
    token of that id; False when `folder` holds no tokenizer that this transformers reads (nothing to tell by)."""
    if cfg.bos_token_id is None or not folder.is_dir() or not has_vocabulary(folder):
        return False
    try:
        tokenizer = load_tokenizer(folder)
    except (ValueError, ImportError, OSError):  # a tokenizer needing sentencepiece, say: the id is kept
        return False
    return tokenizer.bos_token_id is None and cfg.bos_token_id not in tokenizer.all_special_ids
