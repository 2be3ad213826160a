"""QK-norm (Config.qk_norm): each head's query and key normalised before the rotation, or the whole query and key
projections before the split into heads (Config.qk_norm_over="projection", Olmo 3).

Its defining property: attention no longer depends on the length of the projected q and k vectors, so scaling
the query and key projections changes no output (RMSNorm has no bias; its eps is set negligible here); over the
projection, scaling one head alone does change them (it changes that head's share of the norm).
It also keeps what every attention path must: SDPA equals eager, and cached decoding equals the full pass."""

import pytest
import torch

import posformer as pf


def qk_config(**changes) -> pf.Config:
    fields = dict(
        vocab_size=61,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=48,
        position="rope",
        norm="rmsnorm",
        activation="swiglu",
        qkv_bias=False,
        attn_out_bias=False,
        ffn_bias=False,
        qk_norm=True,
        init_std=0.3,
    )
    return pf.Config(**{**fields, **changes})


@pytest.mark.parametrize("over", ["head", "projection"])
def test_outputs_do_not_depend_on_the_scale_of_q_and_k(over: str) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(qk_config(norm_eps=1e-12, qk_norm_over=over)).eval()
    ids = torch.randint(0, 61, (2, 9))
    before = model(ids).logits
    q_dim, kv_dim = 4 * 8, 2 * 8
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.attn.qkv.weight[:q_dim] *= 7.0
            layer.attn.qkv.weight[q_dim : q_dim + kv_dim] *= 0.2
    torch.testing.assert_close(model(ids).logits, before, atol=1e-4, rtol=1e-4)


def test_without_qk_norm_the_same_scaling_changes_the_outputs() -> None:
    torch.manual_seed(0)
    model = pf.Transformer(qk_config(qk_norm=False)).eval()
    ids = torch.randint(0, 61, (2, 9))
    before = model(ids).logits
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.attn.qkv.weight[:32] *= 7.0
    assert (model(ids).logits - before).abs().max() > 1e-2


def test_each_attention_layer_has_its_own_head_norms() -> None:
    model = pf.Transformer(qk_config(arch="encoder_decoder", decoder_start_token_id=0))
    names = {name for name, _ in model.named_parameters() if "q_norm" in name or "k_norm" in name}
    for stack, layers in (("encoder", 2), ("decoder", 2)):
        for i in range(layers):
            assert {f"{stack}.layers.{i}.attn.q_norm.weight", f"{stack}.layers.{i}.attn.k_norm.weight"} <= names
    assert "decoder.layers.0.cross_attn.q_norm.weight" in names
    assert model.decoder.layers[0].attn.q_norm.weight.shape == (8,)


@pytest.mark.parametrize("over", ["head", "projection"])
@pytest.mark.parametrize("arch", ["decoder", "encoder"])
def test_sdpa_equals_eager_with_qk_norm(arch: str, over: str) -> None:
    torch.manual_seed(0)
    sdpa = pf.Transformer(qk_config(arch=arch, qk_norm_over=over)).eval()
    eager = pf.Transformer(qk_config(arch=arch, attn_impl="eager", qk_norm_over=over)).eval()
    eager.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 61, (2, 9))
    mask = torch.tensor([[1] * 9, [0] * 3 + [1] * 6])
    torch.testing.assert_close(
        sdpa(ids, attention_mask=mask).logits[mask.bool()],
        eager(ids, attention_mask=mask).logits[mask.bool()],
        atol=1e-5,
        rtol=1e-5,
    )


@pytest.mark.parametrize("over", ["head", "projection"])
def test_cached_decoding_equals_the_full_pass_with_qk_norm(over: str) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(qk_config(qk_norm_over=over)).eval()
    prompt = torch.randint(0, 61, (2, 5))
    out = model.generate(prompt, max_new_tokens=6, eos_token_id=[])
    full = model(out).logits[:, prompt.shape[1] - 1 : -1].argmax(-1)
    assert torch.equal(full, out[:, prompt.shape[1] :])


@pytest.mark.parametrize("over,changes", [("head", False), ("projection", True)])
def test_scaling_one_query_head_matters_only_over_the_projection(over: str, changes: bool) -> None:
    torch.manual_seed(0)
    model = pf.Transformer(qk_config(norm_eps=1e-12, qk_norm_over=over)).eval()
    ids = torch.randint(0, 61, (2, 9))
    before = model(ids).logits
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.attn.qkv.weight[:8] *= 7.0  # head 0 of 4 (head_dim 8)
    assert ((model(ids).logits - before).abs().max() > 1e-2) == changes


def test_projection_norms_cover_every_head_in_self_and_cross_attention() -> None:
    model = pf.Transformer(qk_config(arch="encoder_decoder", decoder_start_token_id=0, qk_norm_over="projection"))
    for attn in (model.encoder.layers[0].attn, model.decoder.layers[0].attn, model.decoder.layers[0].cross_attn):
        assert (attn.q_norm.weight.shape, attn.k_norm.weight.shape) == ((4 * 8,), (2 * 8,))


@torch.no_grad()
def test_projection_norm_probabilities_equal_the_formula() -> None:
    """One NoPE layer: softmax(scale * q k^T + causal) with q = RMSNorm(x W_q) over all 4 query heads' 32 features,
    k = RMSNorm(x W_k) over both key heads' 16, split into heads of 8 afterwards (GQA: query head h reads key
    head h // 2); the norms' weights random, the input the layer's own (no norm before attention here)."""
    torch.manual_seed(0)
    cfg = qk_config(n_layers=1, position="none", qk_norm_over="projection", norm_placement="output")
    model = pf.Transformer(cfg).eval()
    attn = model.decoder.layers[0].attn
    attn.q_norm.weight.normal_(1.0, 0.5)
    attn.k_norm.weight.normal_(1.0, 0.5)
    ids = torch.randint(0, 61, (2, 6))
    probs = model(ids, output_attentions=True).attentions[0]

    def rms(y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + cfg.norm_eps)

    x = model.embed_tokens(ids)
    q = rms(x @ attn.qkv.weight[:32].T, attn.q_norm.weight).unflatten(-1, (4, 8)).transpose(1, 2)
    k = rms(x @ attn.qkv.weight[32:48].T, attn.k_norm.weight).unflatten(-1, (2, 8)).transpose(1, 2)
    scores = q @ k.repeat_interleave(2, dim=1).transpose(-1, -2) * 8**-0.5
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    expected = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    torch.testing.assert_close(probs, expected)
