"""LLaMA, Mistral, Qwen2 and Qwen3 against transformers 4.57.6: logits, GQA, biases, QK-norm, every RoPE scaling,
and greedy generation."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

import posformer as pf
from hf_oracle import assert_generates_hf_tokens, assert_to_hf_refuses, check_family, padded_batch, save_hf

SIZES = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    initializer_range=0.2,
)


def _llama(**changes) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**SIZES, **changes}, attn_implementation="eager"))


def test_against_hf_llama(tmp_path):
    model = check_family(_llama(), LlamaForCausalLM, tmp_path, padded_batch(97))
    assert model.cfg.kv_heads == 2 and model.cfg.position == "rope"


def test_against_hf_llama_mha_tied_biases(tmp_path):
    hf = _llama(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True, mlp_bias=True)
    model = check_family(hf, LlamaForCausalLM, tmp_path, padded_batch(97))
    assert model.head.proj.weight is model.embed_tokens.weight


def test_against_hf_llama_mqa_head_dim(tmp_path):
    check_family(_llama(num_key_value_heads=1, head_dim=16), LlamaForCausalLM, tmp_path, padded_batch(97))


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0},
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"rope_type": "yarn", "factor": 2.0, "beta_fast": 16, "beta_slow": 2},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        },
    ],
    ids=lambda s: s.get("rope_type", s.get("type")),
)
def test_against_hf_llama_rope_scaling(tmp_path, scaling):
    changes = {"rope_scaling": scaling, "rope_theta": 500.0}
    if scaling.get("original_max_position_embeddings"):
        changes["max_position_embeddings"] = int(scaling["original_max_position_embeddings"] * scaling["factor"])
    if scaling.get("rope_type") == "dynamic":
        changes["max_position_embeddings"] = 8  # the batch (11 tokens) is longer: the dynamic base grows
    check_family(_llama(**changes), LlamaForCausalLM, tmp_path, padded_batch(97))


def test_against_hf_llama_yarn_whose_factor_disagrees_with_the_lengths(tmp_path):
    """factor 4 with an original length of 16 and max_position_embeddings 128 (a ratio of 8): transformers 4.57.6
    uses the factor as given (it warns), and so does from_hf."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
    model = _llama(rope_scaling=scaling, rope_theta=500.0, max_position_embeddings=128)
    ours = check_family(model, LlamaForCausalLM, tmp_path, padded_batch(97))
    assert ours.cfg.position_params["scaling"]["factor"] == 4.0


def test_rope_parameters_v5_form_is_read():
    from posformer.hf.rope import rope_params

    v5 = {
        "model_type": "llama",
        "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0},
    }
    assert rope_params(v5) == {"theta": 500.0, "layout": "half", "scaling": {"type": "linear", "factor": 2.0}}
    v4 = {
        "model_type": "llama",
        "max_position_embeddings": 64,
        "rope_theta": 500.0,
        "rope_scaling": {"type": "linear", "factor": 2.0},
    }
    assert rope_params(v4) == rope_params(v5)


def test_against_hf_llama_base_model(tmp_path):
    torch.manual_seed(0)
    hf = LlamaModel(LlamaConfig(**SIZES, attn_implementation="eager"))
    model = check_family(hf, LlamaModel, tmp_path, padded_batch(97), field="last_hidden_state")
    assert model.head is None


def test_against_hf_mistral(tmp_path):
    torch.manual_seed(0)
    hf = MistralForCausalLM(MistralConfig(**SIZES, sliding_window=None, attn_implementation="eager"))
    check_family(hf, MistralForCausalLM, tmp_path, padded_batch(97))


def test_against_hf_qwen2_qkv_bias(tmp_path):
    torch.manual_seed(0)
    hf = Qwen2ForCausalLM(Qwen2Config(**SIZES, attn_implementation="eager"))
    with torch.no_grad():  # HF initialises biases to zero; make them matter
        for layer in hf.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    model = check_family(hf, Qwen2ForCausalLM, tmp_path, padded_batch(97))
    assert model.cfg.qkv_bias and not model.cfg.attn_out_bias


def _mistral(window: int) -> MistralForCausalLM:
    torch.manual_seed(0)
    return MistralForCausalLM(MistralConfig(**SIZES, sliding_window=window, attn_implementation="eager")).eval()


@pytest.mark.parametrize("window, length", [(1, 11), (4, 11), (4, 80)], ids=["w1-short", "w4-short", "w4-long"])
def test_against_hf_mistral_sliding_window(tmp_path, window, length):
    """A batch with left and right padding through a window of 4 (and of 1: each token sees itself only), of 11
    tokens and of 80, past max_position_embeddings=64."""
    model = check_family(_mistral(window), MistralForCausalLM, tmp_path, padded_batch(97, length=length))
    assert model.cfg.sliding_window == window


def test_mistral_generates_hf_tokens_past_its_window(tmp_path):
    """Greedy decoding with the KV cache, from prompts longer than the window and on past it: the cache
    holds more keys than the window, the mask hides the older ones."""
    hf = _mistral(4)
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(5, 9))  # the left-padded row: 3 pads, then 2 and 6 tokens


def _qwen3(**changes) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    hf = Qwen3ForCausalLM(Qwen3Config(**{**SIZES, "head_dim": 16, **changes}, attn_implementation="eager"))
    with torch.no_grad():  # HF initialises the QK-norm weights to one; make a swapped or dropped one show
        for layer in hf.model.layers:
            layer.self_attn.q_norm.weight.normal_(1.0, 0.5)
            layer.self_attn.k_norm.weight.normal_(1.0, 0.5)
    return hf


@pytest.mark.parametrize(
    "changes, length",
    [
        ({}, 11),
        ({}, 80),
        ({"attention_bias": True, "tie_word_embeddings": True}, 11),
    ],
    ids=["default-short", "default-long", "biases-tied"],
)
def test_against_hf_qwen3_qk_norm(tmp_path, changes, length):
    hf = _qwen3(**changes)
    if changes.get("attention_bias"):
        with torch.no_grad():
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.o_proj):
                    proj.bias.normal_(0, 0.5)
    model = check_family(hf, Qwen3ForCausalLM, tmp_path, padded_batch(97, length=length))
    assert model.cfg.qk_norm and model.cfg.head_dim == 16
    assert model.cfg.qkv_bias == model.cfg.attn_out_bias == bool(changes.get("attention_bias"))


def test_qwen3_generates_hf_tokens_at_short_and_long_inputs(tmp_path):
    """Greedy decoding with the KV cache from a left-padded batch, from prompts shorter and longer than
    max_position_embeddings: the tokens of HF's `generate`."""
    hf = _qwen3(max_position_embeddings=32).eval()
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(6, 40))


def test_against_hf_qwen3_sliding_on_some_layers(tmp_path):
    """Qwen3 slides a window of 4 over the layers from max_window_layers=1 on, after QK-norm."""
    hf = _qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=1)
    model = check_family(hf, Qwen3ForCausalLM, tmp_path, padded_batch(97))
    assert [block.reach.window for block in model.decoder.layers] == [None, 4]


def test_to_hf_refuses_p_rope(tmp_path):
    cfg = pf.Config.preset(
        "llama",
        vocab_size=97,
        d_model=32,
        n_layers=1,
        n_heads=4,
        d_ff=40,
        position_params={"frequency_fraction": 0.5},
        hf_model_type="llama",
    )
    with pytest.raises(pf.hf.UnsupportedCheckpoint, match="p-RoPE .* no Hugging Face equivalent"):
        pf.to_hf(pf.Transformer(cfg), tmp_path)


def _qwen2_windowed(max_window_layers: int) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        **{**SIZES, "num_hidden_layers": 3},
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=max_window_layers,
        attn_implementation="eager",
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("max_window_layers", [0, 1])
def test_against_hf_qwen2_sliding_window_on_some_layers(tmp_path, max_window_layers):
    """Layers from max_window_layers on slide a window of 4 over the 11-token padded batch; the first ones do
    not (every layer slides with 0)."""
    model = check_family(_qwen2_windowed(max_window_layers), Qwen2ForCausalLM, tmp_path, padded_batch(97))
    windows = [block.reach.window for block in model.decoder.layers]
    assert windows == [None] * max_window_layers + [4] * (3 - max_window_layers)


def test_qwen2_with_windows_on_some_layers_generates_hf_tokens(tmp_path):
    hf = _qwen2_windowed(1)
    model = pf.from_hf(save_hf(hf, tmp_path))
    assert_generates_hf_tokens(model, hf, 97, lengths=(9,))


TEMPERATURE = {"scale": 0.1, "floor_size": 4}


@pytest.mark.parametrize(
    "family, changes, name",
    [
        ("llama", {"parallel_residual": True}, "parallel_residual=True"),
        ("llama", {"embed_norm": True}, "embed_norm=True"),
        ("llama", {"scale_embeddings": True}, "scale_embeddings=True"),
        ("llama", {"attn_scale": 0.3}, "attention scale other than head_dim"),
        ("llama", {"head_transform": True}, "head_transform=True"),
        ("llama", {"head_bias": True}, "head_bias=True"),
        ("llama", {"head": "span_qa"}, "'span_qa'"),
        ("llama", {"type_vocab_size": 2}, "type_vocab_size=2"),
        ("llama", {"query_temperature": TEMPERATURE}, "query_temperature="),
        ("llama", {"n_decoder_layers": 1}, "decoder_layers=1"),
        ("qwen2", {"first_attn_norm": False}, "first_attn_norm=False"),
        ("qwen3", {"scale_tied_head": True, "tie_embeddings": True}, "scale_tied_head=True"),
        ("smollm3", {"arch": "encoder", "head": "none"}, "arch='encoder'"),
        ("mistral", {"qkv_bias": True, "attn_out_bias": True}, "qkv_bias=True"),
        ("mistral", {"ffn_bias": True}, "ffn_bias=True"),
    ],
)
def test_to_hf_refuses_what_the_llama_families_cannot_express(tmp_path, family, changes, name):
    """Fields these config classes have no key for: transformers would build the model without them."""
    cfg = pf.from_hf(save_hf(_llama(), tmp_path / "hf")).cfg
    if family == "qwen3":
        cfg = cfg.replace(qk_norm=True)
    assert_to_hf_refuses(cfg.replace(hf_model_type=family), changes, name, tmp_path / "out")


def test_mistral_has_no_biases_whatever_its_config_says():
    """Why Mistral's export refuses biases: transformers' Mistral builds no bias, with attention_bias or not."""
    torch.manual_seed(0)
    hf = MistralForCausalLM(MistralConfig(**SIZES, attention_bias=True, mlp_bias=True))
    assert not [name for name, _ in hf.named_parameters() if name.endswith("bias")]
