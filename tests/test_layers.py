"""Norms, activations, residual placements and heads, each checked against an outside reference."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import posformer as pf
from posformer.config.checks import ACTIVATIONS
from posformer.modules.feedforward import FeedForward
from posformer.modules.heads import token_loss
from posformer.modules.norms import RMSNorm, UnitOffsetRMSNorm, deepnorm_constants
from tests.conftest import tiny

transformers = pytest.importorskip("transformers")


def test_rmsnorm_equals_hugging_face_llama() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    theirs = LlamaRMSNorm(16, eps=1e-6)
    ours = RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    x = torch.randn(3, 5, 16)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unit_offset_rmsnorm_equals_hugging_face_gemma3_in_float32_and_bfloat16(dtype: torch.dtype) -> None:
    """Gemma scales by 1 + weight in float32 before the cast back: in bfloat16 that differs from casting first."""
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    theirs = Gemma3RMSNorm(16, eps=1e-6)
    ours = UnitOffsetRMSNorm(16, eps=1e-6)
    assert not ours.weight.any()  # zero: the identity scale, as Gemma starts
    with torch.no_grad():
        theirs.weight.normal_()
        ours.weight.copy_(theirs.weight)
    theirs, ours = theirs.to(dtype), ours.to(dtype)
    x = torch.randn(3, 5, 16).to(dtype)
    torch.testing.assert_close(ours(x), theirs(x), atol=0, rtol=0)


def _gelu(a: torch.Tensor) -> torch.Tensor:
    """GELU (Hendrycks & Gimpel 2016): x * Phi(x)."""
    return 0.5 * a * (1 + torch.erf(a / math.sqrt(2)))


def _gelu_tanh(a: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation (Hendrycks & Gimpel 2016, section 2)."""
    return 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3)))


FORMULAS = {  # activation name -> f(a, b): a is the (gate) pre-activation, b the value half of gated units
    "relu": lambda a, b: torch.relu(a),
    "gelu": lambda a, b: _gelu(a),
    "gelu_tanh": lambda a, b: _gelu_tanh(a),
    "swish": lambda a, b: a * torch.sigmoid(a),
    "silu": lambda a, b: a * torch.sigmoid(a),
    "glu": lambda a, b: torch.sigmoid(a) * b,
    "swiglu": lambda a, b: a * torch.sigmoid(a) * b,
    "geglu": lambda a, b: _gelu(a) * b,
    "geglu_tanh": lambda a, b: _gelu_tanh(a) * b,
    "reglu": lambda a, b: torch.relu(a) * b,
}


def test_every_activation_a_config_accepts_has_a_formula() -> None:
    assert set(FORMULAS) == set(ACTIVATIONS)


@pytest.mark.parametrize("name", list(FORMULAS))
def test_activations_follow_their_formulas(name: str) -> None:
    """Gated units: act(x W) * (x V) (Shazeer 2020) with W, V the two halves of `up`."""
    reference = FORMULAS[name]
    cfg = tiny(activation=name)
    ffn = FeedForward(cfg)
    x = torch.randn(2, 3, cfg.d_model)
    h = x @ ffn.up.weight.T + ffn.up.bias
    a, b = (h[..., : cfg.ff_dim], h[..., cfg.ff_dim :]) if ffn.gated else (h, None)
    expected = reference(a, b) @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "arch, n, m, expected",
    [
        ("encoder", 12, 0, {"encoder": ((2 * 12) ** 0.25, (8 * 12) ** -0.25)}),
        ("decoder", 0, 24, {"decoder": ((2 * 24) ** 0.25, (8 * 24) ** -0.25)}),
        (
            "encoder_decoder",
            6,
            6,
            {
                "encoder": (0.81 * (6**4 * 6) ** (1 / 16), 0.87 * (6**4 * 6) ** (-1 / 16)),
                "decoder": ((3 * 6) ** 0.25, (12 * 6) ** -0.25),
            },
        ),
    ],
)
def test_deepnorm_constants_follow_the_paper(arch, n, m, expected) -> None:
    for stack, (alpha, beta) in expected.items():
        assert deepnorm_constants(arch, n, m, stack) == pytest.approx((alpha, beta))


def test_deepnet_paper_values() -> None:
    """DeepNet table 1 for 100 + 100 layers: encoder alpha 0.81 (N^4 M)^(1/16) = 0.81 * 100^(5/16)."""
    alpha, beta = deepnorm_constants("encoder_decoder", 100, 100, "encoder")
    assert alpha == pytest.approx(0.81 * 100 ** (5 / 16))
    assert beta == pytest.approx(0.87 * 100 ** (-5 / 16))


def test_deepnorm_scales_residual_and_init() -> None:
    cfg = tiny("decoder", norm="deepnorm", norm_placement="post", n_layers=3)
    model = pf.Transformer(cfg)
    alpha, beta = deepnorm_constants("decoder", 3, 3, "decoder")
    block = model.decoder.layers[0]
    assert block.attn_res.alpha == pytest.approx(alpha)
    fan_in, fan_out = cfg.d_model, cfg.ff_dim
    xavier_std = math.sqrt(2.0 / (fan_in + fan_out))
    assert block.ffn.up.weight.std().item() == pytest.approx(beta * xavier_std, rel=0.15)
    x = torch.randn(1, 4, cfg.d_model)
    res = block.ffn_res
    torch.testing.assert_close(res(x, torch.zeros_like), res.norm(alpha * x))


@pytest.mark.parametrize("placement", ["pre", "post", "sandwich", "output"])
def test_residual_placements(placement: str) -> None:
    cfg = tiny(norm_placement=placement)
    res = pf.Transformer(cfg).decoder.layers[0].ffn_res
    x = torch.randn(2, 3, cfg.d_model)
    f = torch.tanh
    expected = {
        "pre": lambda: x + f(res.norm(x)),
        "post": lambda: res.norm(x + f(x)),
        "sandwich": lambda: x + res.post_norm(f(res.norm(x))),
        "output": lambda: x + res.norm(f(x)),
    }[placement]()
    torch.testing.assert_close(res(x, f), expected)


def test_output_placement_block_is_x_plus_the_norm_of_each_sublayer_output() -> None:
    """norm_placement="output" (Olmo 2/3, EXAONE 4): attention and the FFN read their input unnormalised, and each
    output goes through RMSNorm, w * y / sqrt(mean(y^2) + eps) computed here by hand, before the residual adds it."""
    cfg = tiny(norm="rmsnorm", norm_eps=1e-6, norm_placement="output", position="rope", activation="swiglu")
    model = pf.Transformer(cfg).eval()
    block = model.decoder.layers[0]
    with torch.no_grad():
        for res in (block.attn_res, block.ffn_res):
            res.norm.weight.normal_(1.0, 0.5)
    seen = {}
    block.register_forward_pre_hook(lambda m, args: seen.__setitem__("x", args[0]))
    block.attn.register_forward_pre_hook(lambda m, args: seen.__setitem__("attn_in", args[0]))
    block.attn.register_forward_hook(lambda m, args, out: seen.__setitem__("attn_out", out[0]))
    block.ffn.register_forward_pre_hook(lambda m, args: seen.__setitem__("ffn_in", args[0]))
    block.ffn.register_forward_hook(lambda m, args, out: seen.__setitem__("ffn_out", out))
    block.register_forward_hook(lambda m, args, out: seen.__setitem__("y", out[0]))
    with torch.no_grad():
        model(torch.randint(0, cfg.vocab_size, (2, 7)))

    def rms(y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)

    assert block.attn_res.post_norm is None and block.ffn_res.post_norm is None
    torch.testing.assert_close(seen["attn_in"], seen["x"], rtol=0, atol=0)
    h = seen["x"] + rms(seen["attn_out"], block.attn_res.norm.weight)
    torch.testing.assert_close(seen["ffn_in"], h)
    torch.testing.assert_close(seen["y"], h + rms(seen["ffn_out"], block.ffn_res.norm.weight))


def test_losses_ignore_minus_100() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.randint(0, 7, (2, 5))
    labels[0, 2] = labels[1, 4] = -100
    keep = labels[:, 1:] != -100
    manual = -torch.log_softmax(logits[:, :-1], -1).gather(-1, labels[:, 1:].clamp(min=0)[..., None])[..., 0]
    assert token_loss(logits, labels, shift=True).item() == pytest.approx(manual[keep].mean().item(), rel=1e-5)


@pytest.mark.parametrize("head", ["causal_lm", "masked_lm", "span_qa", "classification", "none"])
def test_heads_have_their_shapes_and_losses(head: str) -> None:
    arch = "decoder" if head == "causal_lm" else "encoder"
    cfg = tiny(arch, head=head, num_labels=3)
    model = pf.Transformer(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 6))
    if head == "span_qa":
        out = model(ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, -100]))
        assert out.start_logits.shape == out.end_logits.shape == (2, 6)
        expected = (
            F.cross_entropy(out.start_logits, torch.tensor([1, 2]))
            + F.cross_entropy(out.end_logits[:1], torch.tensor([3]))
        ) / 2
        assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    elif head == "classification":
        out = model(ids, labels=torch.tensor([0, 2]))
        assert out.logits.shape == (2, 3) and out.loss is not None
    elif head == "none":
        out = model(ids)
        assert out.logits is None and out.last_hidden_state.shape == (2, 6, cfg.d_model)
    else:
        out = model(ids, labels=ids)
        assert out.logits.shape == (2, 6, cfg.vocab_size) and torch.isfinite(out.loss)


@pytest.mark.parametrize("tie", [True, False])
def test_seq2seq_head_tied_or_untied(tie: bool) -> None:
    cfg = tiny("encoder_decoder", tie_embeddings=tie)
    model = pf.Transformer(cfg)
    assert (model.head.proj.weight is model.embed_tokens.weight) == tie
    labels = torch.randint(0, cfg.vocab_size, (2, 4))
    labels[0, -1] = -100
    out = model(torch.randint(0, cfg.vocab_size, (2, 5)), labels=labels)
    assert torch.isfinite(out.loss)
    shifted = model.shift_right(labels)
    assert shifted[:, 0].tolist() == [0, 0] and torch.equal(shifted[1, 1:], labels[1, :-1])


def test_loss_with_nothing_to_predict_is_zero_not_nan() -> None:
    cfg = tiny("decoder")
    model = pf.Transformer(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 1))
    out = model(ids, labels=ids)
    assert out.loss.item() == 0.0
    out.loss.backward()
