"""`resize_token_embeddings` and `gradient_checkpointing_enable`, the names a transformers user reaches for, on a
model converted from Hugging Face: resized as Hugging Face resizes its own (kept rows, added rows at the old rows'
mean, a tied head still tied), the two models then give the same logits over the new vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf
from hf_oracle import save_hf

VOCAB = 61


def _pair(tied: bool, directory: Path) -> tuple[LlamaForCausalLM, pf.Transformer]:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=2,
        tie_word_embeddings=tied,
    )
    hf = LlamaForCausalLM(config).eval()
    return hf, pf.from_hf(save_hf(hf, directory)).eval()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("new", [VOCAB + 7, VOCAB - 5])
def test_a_resized_model_gives_hugging_faces_logits_over_the_new_vocabulary(
    tied: bool, new: int, tmp_path: Path
) -> None:
    hf, ours = _pair(tied, tmp_path)
    hf.resize_token_embeddings(new)  # mean_resizing: N(mean, 1e-9 * covariance) per added row
    returned = ours.resize_token_embeddings(new)
    assert returned is ours.embed_tokens and ours.cfg.vocab_size == new == returned.num_embeddings
    assert (ours.head.proj.weight is ours.embed_tokens.weight) == tied
    if new > VOCAB:  # ours is the mean itself; Hugging Face's a draw within ~3e-5 standard deviations of it
        mean = ours.embed_tokens.weight[:VOCAB].mean(0)
        assert torch.equal(ours.embed_tokens.weight[VOCAB:], mean.expand(new - VOCAB, -1))
    ids = torch.randint(0, new, (2, 9))
    torch.testing.assert_close(ours(ids).logits, hf(ids).logits, rtol=1e-4, atol=1e-4)


def test_gradient_checkpointing_enable_and_disable_switch_activation_checkpointing(tmp_path: Path) -> None:
    _, ours = _pair(False, tmp_path)
    assert not ours.is_gradient_checkpointing
    ours.gradient_checkpointing_enable()
    assert ours.is_gradient_checkpointing and ours.decoder.activation_checkpointing
    ours.gradient_checkpointing_disable()
    assert not ours.is_gradient_checkpointing


def test_a_vocabulary_size_out_of_range_is_refused_by_name(tmp_path: Path) -> None:
    _, ours = _pair(False, tmp_path)
    with pytest.raises(
        ValueError, match=r"resize_token_embeddings: new_num_tokens=0 is invalid: expected a positive integer"
    ):
        ours.resize_token_embeddings(0)
    assert ours.cfg.vocab_size == VOCAB
