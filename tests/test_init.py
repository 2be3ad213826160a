"""Config.init: the "t5" scheme's per-weight stds, and "normal" drawing the same weights as before it existed."""

from __future__ import annotations

import math

import pytest
import torch

import posformer as pf
from posformer.model import Transformer

# Wide enough that every checked tensor has >= 1024 elements (the relative bias table: 128 buckets x 8 heads).
T5_TINY = dict(
    vocab_size=512,
    d_model=64,
    n_layers=1,
    n_decoder_layers=1,
    n_heads=8,
    d_head=8,
    d_ff=128,
    position_params={"num_buckets": 128, "max_distance": 256},
)
SMALL = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_positions=32)


def _sum_of_squares(model: torch.nn.Module) -> float:
    return float(sum((p.detach().double() ** 2).sum() for p in model.parameters()))


def _check_normal(name: str, weight: torch.Tensor, std: float) -> None:
    """weight looks like N(0, std) draws.

    For n normal draws the sample std has relative standard error 1/sqrt(2n) and the
    sample mean standard error std/sqrt(n); 5 standard errors (about 11% of the std for
    the smallest tensor here, n = 1024) keeps a false failure below 1e-6 per check,
    while a wrong formula (off by sqrt(d_head) = 2.8x at least, or 0.02 vs 1/8) fails.
    """
    w = weight.detach().double().flatten()
    n = w.numel()
    assert n >= 1024, name
    assert abs(float(w.std()) / std - 1) < 5 / math.sqrt(2 * n), (name, float(w.std()), std)
    assert abs(float(w.mean())) < 5 * std / math.sqrt(n), (name, float(w.mean()))


def test_t5_preset_sets_the_t5_scheme():
    assert pf.Config.preset("t5").init == "t5"
    assert pf.Config().init == "normal"


def test_t5_scheme_matches_t5_init_weights_stds():
    """Hugging Face `T5PreTrainedModel._init_weights` (factor 1), weight by weight; untied head: fan-in."""
    torch.manual_seed(0)
    model = Transformer(pf.Config.preset("t5", **T5_TINY, tie_embeddings=False))
    d_model, d_head, n_heads, d_ff = 64, 8, 8, 128
    q_dim = n_heads * d_head
    _check_normal("embed_tokens", model.embed_tokens.weight, 1.0)
    _check_normal("lm head", model.head.proj.weight, d_model**-0.5)
    for stack in (model.encoder, model.decoder):
        _check_normal("relative bias", stack.position.table.weight, d_model**-0.5)
        for block in stack.layers:
            qkv = block.attn.qkv.weight
            _check_normal("q", qkv[:q_dim], (d_model * d_head) ** -0.5)
            _check_normal("k, v", qkv[q_dim:], d_model**-0.5)
            _check_normal("o", block.attn.out.weight, q_dim**-0.5)
            _check_normal("wi", block.ffn.up.weight, d_model**-0.5)
            _check_normal("wo", block.ffn.down.weight, d_ff**-0.5)
    cross = model.decoder.layers[0].cross_attn
    _check_normal("cross q", cross.q.weight, (d_model * d_head) ** -0.5)
    _check_normal("cross k, v", cross.kv.weight, d_model**-0.5)
    _check_normal("cross o", cross.out.weight, q_dim**-0.5)
    norms = [p for n, p in model.named_parameters() if p.dim() == 1]
    assert norms and all(bool((p == 1).all()) for p in norms)  # RMSNorm weights: factor * 1.0


def test_t5_scheme_draws_a_tied_weight_once_as_the_embedding():
    torch.manual_seed(0)
    model = Transformer(pf.Config.preset("t5", **T5_TINY))
    assert model.head.proj.weight is model.embed_tokens.weight
    _check_normal("tied embed_tokens", model.embed_tokens.weight, 1.0)


def test_t5_scheme_initialises_a_span_head_as_qa_outputs():
    torch.manual_seed(0)
    model = Transformer(pf.Config.preset("t5", **{**T5_TINY, "d_model": 512}, arch="encoder", head="span_qa"))
    _check_normal("qa_outputs", model.head.proj.weight, 512**-0.5)
    assert bool((model.head.proj.bias == 0).all())


@pytest.mark.parametrize(
    "build,expected",
    [
        # sums of squares of every parameter, recorded before Config.init existed (default, bert) and with the
        # removed tasks.seq2seq_qa.t5_init_ applied after construction (t5)
        (lambda: pf.Config(**SMALL), 167.3589294426),
        (lambda: pf.Config.preset("bert", **SMALL), 200.2319542569),
        (
            lambda: pf.Config.preset(
                "t5", vocab_size=97, d_model=32, n_layers=2, n_decoder_layers=2, n_heads=4, d_head=8, d_ff=48
            ),
            4461.4348267773,
        ),
    ],
    ids=["default", "bert", "t5"],
)
def test_same_seed_draws_the_same_weights_as_before(build, expected):
    torch.manual_seed(0)
    assert _sum_of_squares(Transformer(build())) == pytest.approx(expected, rel=1e-9)


def test_normal_scheme_draws_every_matrix_from_init_std():
    """The default "normal" scheme, as BERT's and GPT-2's `_init_weights` with initializer_range = init_std:
    every Linear and Embedding weight N(0, init_std), every bias 0, every norm weight 1."""
    torch.manual_seed(0)
    model = Transformer(pf.Config(**SMALL, init_std=0.05))
    matrices = 0
    for name, param in model.named_parameters():
        if param.dim() == 2:
            _check_normal(name, param, 0.05)
            matrices += 1
        elif name.endswith("norm.weight"):
            assert bool((param == 1).all()), name
        else:
            assert name.endswith(".bias") and bool((param == 0).all()), name
    assert matrices == 1 + 4 * SMALL["n_layers"]  # embed_tokens; qkv, out, up, down per layer
