"""Llama 4's text model (llama4_text) against transformers 4.57.6 and 5: iRoPE layers (chunks of 8 on the RoPE layers,
the L2 QK-norm, a NoPE layer with the log-n temperature of floor 4) with dense layers only, with experts on every
second layer and on every layer; inputs shorter than a chunk and past it (and past five temperature steps), left
padding included; a round trip; greedy generation equal to HF's; refusals by name."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Llama4ForCausalLM, Llama4TextConfig, Llama4TextModel

import posformer as pf
from hf_oracle import TOLERANCE, assert_generates_hf_tokens, check_family, padded_batch, save_hf
from posformer.hf.llama4 import config_to_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=24,
    intermediate_size_mlp=40,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    initializer_range=0.2,
    rope_theta=100.0,
    attention_chunk_size=8,
    floor_scale=4,
    attn_scale=0.5,
    num_local_experts=4,
    num_experts_per_tok=2,
)
DENSE, EVERY_SECOND = {"moe_layers": []}, {"interleave_moe_layer_step": 2}


@torch.no_grad()
def _llama4(model_class=Llama4ForCausalLM, **changes):
    torch.manual_seed(0)
    hf = model_class(Llama4TextConfig(**{**SIZES, **changes}, attn_implementation="eager")).eval()
    for name, param in hf.named_parameters():  # HF starts every norm weight at one; make a swapped one show
        if "norm" in name:
            param.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize("length", [6, 20], ids=["within-a-chunk", "past-the-chunk"])
@pytest.mark.parametrize(
    "changes",
    [DENSE, EVERY_SECOND, {}, {**EVERY_SECOND, "use_qk_norm": False, "attn_temperature_tuning": False}],
    ids=["dense", "experts-every-second-layer", "experts-every-layer", "no-qk-norm-no-temperature"],
)
def test_against_hf_llama4(tmp_path, changes, length):
    model = check_family(_llama4(**changes), Llama4ForCausalLM, tmp_path, padded_batch(97, length=length))
    cfg = model.cfg
    assert cfg.layer_types == ["chunked_rope"] * 3 + ["full_nope"]
    rope, nope = cfg.layer_settings["chunked_rope"], cfg.layer_settings["full_nope"]
    assert rope["attention_chunk"] == 8 and nope["position"] == "none"
    assert rope.get("qk_norm_kind") == ("l2" if changes.get("use_qk_norm", True) else None)
    temperature = {"scale": 0.5, "floor_size": 4} if changes.get("attn_temperature_tuning", True) else None
    assert nope.get("query_temperature") == temperature
    experts = {"moe_layers": None, "interleave_moe_layer_step": [False, True, False, True]}
    assert cfg.moe_layers == experts.get(next(iter(changes), ""), None)
    if "moe_layers" not in changes:
        assert (cfg.router_softmax, cfg.shared_expert_d_ff, cfg.expert_d_ff, cfg.d_ff) == ("sigmoid_input", 24, 24, 40)


def test_against_hf_llama4_base_model(tmp_path):
    hf = _llama4(Llama4TextModel, **EVERY_SECOND)
    model = check_family(hf, Llama4TextModel, tmp_path, padded_batch(97, length=20), field="last_hidden_state")
    assert model.head is None


def test_the_expert_router_and_the_shared_expert_matter(tmp_path):
    """The parity above is no accident of small weights: routing by a softmax over the top-k logits, scaling the
    experts' outputs instead of their inputs, or dropping the shared expert each moves the logits past TOLERANCE."""
    hf = _llama4(**EVERY_SECOND)
    model = pf.from_hf(save_hf(hf, tmp_path))
    batch = padded_batch(97, length=20)
    with torch.no_grad():
        expected = hf(**batch).logits
        for block in model.decoder.layers[1::2]:
            block.ffn.scales_input, block.ffn.softmax_over = False, "top_k"
        assert (model(**batch).logits - expected).abs().max() > 100 * TOLERANCE
        for block in model.decoder.layers[1::2]:
            block.ffn.scales_input, block.ffn.softmax_over = True, "sigmoid_input"
            block.ffn.shared_expert = None
        assert (model(**batch).logits - expected).abs().max() > 100 * TOLERANCE


@pytest.mark.parametrize("changes", [DENSE, EVERY_SECOND], ids=["dense", "experts-every-second-layer"])
def test_llama4_generates_hf_tokens(tmp_path, changes):
    """Greedy decoding with the KV cache from a 6-token prompt to 22 tokens: past the chunk of 8 and five steps of
    the NoPE layer's temperature. Rows without padding: transformers' temperature reads the cache slot, which for a
    left-padded row is not the position its RoPE reads (posformer reads the position id for both)."""
    hf = _llama4(**changes)
    model = pf.from_hf(save_hf(hf, tmp_path))
    ids = padded_batch(97, length=6)["input_ids"][:1].repeat(2, 1)
    ids[1] = ids[1].flip(0)
    expected = hf.generate(ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(model.generate(ids, max_new_tokens=16, eos_token_id=[]), expected)


def test_llama4_without_temperature_generates_hf_tokens_from_a_left_padded_prompt(tmp_path):
    """Without the temperature, a left-padded row decodes as transformers decodes it: its chunks count from its first
    real token and its RoPE positions from 0 there."""
    hf = _llama4(attn_temperature_tuning=False, **EVERY_SECOND)
    assert_generates_hf_tokens(pf.from_hf(save_hf(hf, tmp_path)), hf, 97, lengths=(9,), new_tokens=12)


def test_llama4_writes_its_own_fields_back(tmp_path):
    model = pf.from_hf(save_hf(_llama4(**EVERY_SECOND), tmp_path))
    hf = config_to_hf(model.cfg)
    assert (hf["no_rope_layers"], hf["moe_layers"], hf["attention_chunk_size"]) == ([1, 1, 1, 0], [1, 3], 8)
    assert hf["layer_types"] == ["chunked_attention"] * 3 + ["full_attention"]
    assert (hf["use_qk_norm"], hf["attn_temperature_tuning"], hf["attn_scale"], hf["floor_scale"]) == (
        True,
        True,
        0.5,
        4,
    )
    assert (hf["intermediate_size"], hf["intermediate_size_mlp"], hf["num_local_experts"]) == (24, 40, 4)


@pytest.mark.parametrize(
    "feature",
    [
        {"router_jitter_noise": 0.1},
        {"attention_bias": True},
        {"hidden_act": "gelu_new"},
        {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        {"layer_types": ["sliding_attention"] * 4},
    ],
    ids=lambda f: next(iter(f)),
)
def test_unsupported_llama4_features_are_refused_by_name(tmp_path, feature):
    save_hf(_llama4(**DENSE), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    if "rope_scaling" in feature and "rope_parameters" in config:  # transformers 5's form: the scaling inside
        feature = {"rope_parameters": {**config["rope_parameters"], **feature["rope_scaling"]}}
    (tmp_path / "config.json").write_text(json.dumps({**config, **feature}))
    name = next(iter(feature))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="rope scaling 'linear'" if "rope" in name else name):
        pf.from_hf(tmp_path)


@pytest.mark.parametrize(
    "changes, name",
    [
        ({"sliding_window": 4}, "sliding_window"),
        ({"layer_settings": {"chunked_rope": {"qk_norm": True}, "full_nope": {"position": "none"}}}, "QK-norm"),
        ({"router_softmax": "all"}, "router_softmax"),
        ({"shared_expert_d_ff": 16}, "shared_expert_d_ff"),
        ({"attention_output_gate": True}, "attention_output_gate"),
        ({"hf_model_type": "llama"}, "attention_chunk"),
    ],
)
def test_to_hf_refuses_what_llama4_cannot_express(tmp_path, changes, name):
    model = pf.from_hf(save_hf(_llama4(**EVERY_SECOND), tmp_path / "hf"))
    model = pf.Transformer(model.cfg.replace(**changes))
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match=name):
        pf.to_hf(model, tmp_path / "out")
