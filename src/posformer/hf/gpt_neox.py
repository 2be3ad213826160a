"""GPT-NeoX (Pythia, GPT-NeoX-20B): partial RoPE, pre-LayerNorm, GELU MLP, parallel or sequential residual.

The fused `query_key_value` projection is laid out per head (see `qkv_layout`).
Only the first `rotary_pct * head_dim` dims of each head are rotated, pairs (i, i + r/2).
In transformers 4.57.6 `rotary_pct` and `rotary_emb_base` override `partial_rotary_factor`
and `rope_theta` when a config is loaded, so they are read first here too.
Heads: GPTNeoXForCausalLM (causal_lm, `embed_out`, untied by default) and GPTNeoXModel (none).
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.activations import activation_from_hf, activation_to_hf
from posformer.hf.family import Family, UnsupportedCheckpoint, architecture, register
from posformer.hf.layout import PLAIN_LAYERS, require_fields, require_head
from posformer.hf.mapping import Rule, linear, norm, same
from posformer.hf.qkv_layout import per_head_qkv
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "gpt_neox"
HEADS = {"GPTNeoXForCausalLM": "causal_lm", "GPTNeoXModel": "none"}
ARCHITECTURES = {head: name for name, head in HEADS.items()}


def _first_present(places: tuple[tuple[dict, str], ...], default: float) -> float:
    """The value of the first (dict, key) in `places` whose key is set; else `default`."""
    for source, name in places:
        if source.get(name) is not None:
            return float(source[name])
    return default


def _position_params(hf: dict) -> dict:
    """RoPE `position_params` with GPT-NeoX's base and rotary fraction (v4 names first, then v5's rope_parameters)."""
    params = hf.get("rope_parameters") if isinstance(hf.get("rope_parameters"), dict) else {}
    theta = _first_present(((hf, "rotary_emb_base"), (hf, "rope_theta"), (params, "rope_theta")), 10000.0)
    fraction = _first_present(
        ((hf, "rotary_pct"), (hf, "partial_rotary_factor"), (params, "partial_rotary_factor")), 0.25
    )
    return {**rope_params(hf), "theta": theta, "rotary_fraction": fraction}


def config_from_hf(hf: dict) -> Config:
    bias = bool(hf.get("attention_bias", True))
    return Config(
        arch="decoder",
        vocab_size=hf.get("vocab_size", 50432),
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        position="rope",
        position_params=_position_params(hf),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_eps", 1e-5),
        norm_placement="pre",
        activation=activation_from_hf(MODEL_TYPE, hf.get("hidden_act", "gelu")),
        dropout=hf.get("hidden_dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=True,
        parallel_residual=bool(hf.get("use_parallel_residual", True)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id", 0),
        eos_token_id=hf.get("eos_token_id", 2),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def config_to_hf(cfg: Config) -> dict:
    require_head(cfg, MODEL_TYPE)
    require_fields(
        cfg,
        MODEL_TYPE,
        arch="decoder",
        position="rope",
        norm="layernorm",
        norm_bias=True,
        norm_placement="pre",
        use_final_norm=True,
        embed_norm=False,
        kv_heads=cfg.n_heads,
        head_dim=cfg.d_model // cfg.n_heads,
        attn_out_bias=cfg.qkv_bias,
        ffn_bias=True,
        attn_scale=None,
        scale_embeddings=False,
        type_vocab_size=0,
        head_bias=False,
        scale_tied_head=False,
        **PLAIN_LAYERS,
        head_transform=False,
        first_attn_norm=True,
        decoder_layers=cfg.n_layers,
    )
    params = cfg.position_params
    if params.get("layout", "half") != "half":
        raise UnsupportedCheckpoint(
            f"to_hf: gpt_neox rotates pairs (i, i + r/2) (layout 'half'); "
            f"Config.position_params has layout={params['layout']!r}"
        )
    rope = rope_to_hf(cfg, partial=True)
    fraction = float(params.get("rotary_fraction", 1.0))
    return {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.ff_dim,
        "hidden_act": activation_to_hf(MODEL_TYPE, cfg.activation),
        "rotary_pct": fraction,
        "partial_rotary_factor": fraction,
        "rotary_emb_base": rope["rope_theta"],
        **rope,
        "layer_norm_eps": cfg.norm_eps,
        "hidden_dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "use_parallel_residual": cfg.parallel_residual,
        "attention_bias": cfg.qkv_bias,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
    }


def rules(cfg: Config) -> list[Rule]:
    base = "gpt_neox." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}embed_in.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}layers.{i}"
        out += norm(f"{ours}.attn_res.norm", f"{theirs}.input_layernorm")
        out += per_head_qkv(
            f"{ours}.attn.qkv", f"{theirs}.attention.query_key_value", cfg.n_heads, cfg.head_dim, cfg.qkv_bias
        )
        out += linear(f"{ours}.attn.out", f"{theirs}.attention.dense", cfg.attn_out_bias)
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.post_attention_layernorm")
        out += linear(f"{ours}.ffn.up", f"{theirs}.mlp.dense_h_to_4h")
        out += linear(f"{ours}.ffn.down", f"{theirs}.mlp.dense_4h_to_h")
    out += norm("decoder.norm", f"{base}final_layer_norm")
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out += linear("head.proj", "embed_out", bias=False)
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """Causal-mask and rotary buffers of old checkpoints, and a stored copy of a tied head."""
    patterns = [r".*attention\.(masked_)?bias", r".*rotary_emb\.inv_freq"]
    if cfg.tie_embeddings:
        patterns.append(r"embed_out\.weight")
    return tuple(patterns)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
