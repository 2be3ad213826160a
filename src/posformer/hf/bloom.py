"""BLOOM: ALiBi, a LayerNorm on the word embeddings, pre-LayerNorm, tanh-GELU MLP (4 * d), tied head.

The fused `query_key_value` projection is laid out per head (see `qkv_layout`).
BLOOM's ALiBi adds +m_h * (key's index among the row's tokens); posformer's adds
-m_h * (query position - key position). Within a row of a causal attention the two
differ by a constant per query (for a left-padded row, the pads shift every key
index by the same amount), which softmax cancels: the logits are the same.
BLOOM's `bloom_gelu_forward` is the tanh approximation of GELU with sqrt(2/pi)
rounded to 0.79788456, a relative difference below 1e-8: posformer's "gelu_tanh".
Heads: BloomForCausalLM (causal_lm) and BloomModel (none).
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.layout import PLAIN_LAYERS, require_fields, require_head
from posformer.hf.mapping import Rule, linear, norm, same
from posformer.hf.qkv_layout import per_head_qkv

MODEL_TYPE = "bloom"
HEADS = {"BloomForCausalLM": "causal_lm", "BloomModel": "none"}
ARCHITECTURES = {head: name for name, head in HEADS.items()}
DEFAULT_MAX_POSITIONS = 2048  # BLOOM has no position limit; Config needs one (ALiBi ignores it)


def config_from_hf(hf: dict) -> Config:
    """HF BloomConfig dict -> `Config`.

    `pretraining_tp` alone changes nothing. With `slow_but_exact=True` and `pretraining_tp > 1`,
    transformers 4.57.6 computes the attention `dense` and the MLP `dense_4h_to_h` as sums of
    slices without their biases: a different function, refused.
    """
    if hf.get("apply_residual_connection_post_layernorm", False):
        raise unsupported(
            MODEL_TYPE, "apply_residual_connection_post_layernorm=True (the residual taken after the LayerNorm)"
        )
    if hf.get("slow_but_exact", False) and hf.get("pretraining_tp", 1) > 1:
        raise unsupported(
            MODEL_TYPE,
            f"slow_but_exact=True with pretraining_tp={hf['pretraining_tp']} "
            "(sliced output projections that drop their biases)",
        )
    d_model = hf.get("n_embed") or hf.get("hidden_size", 64)
    return Config(
        arch="decoder",
        vocab_size=hf.get("vocab_size", 250880),
        d_model=d_model,
        n_layers=hf.get("n_layer", hf.get("num_hidden_layers", 2)),
        n_heads=hf.get("n_head", hf.get("num_attention_heads", 8)),
        d_ff=4 * d_model,
        position="alibi",
        max_positions=hf.get("seq_length") or DEFAULT_MAX_POSITIONS,
        norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        norm_placement="pre",
        embed_norm=True,
        activation="gelu_tanh",
        dropout=hf.get("hidden_dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id", 1),
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
        position="alibi",
        norm="layernorm",
        norm_bias=True,
        norm_placement="pre",
        use_final_norm=True,
        embed_norm=True,
        parallel_residual=False,
        activation="gelu_tanh",
        ff_dim=4 * cfg.d_model,
        kv_heads=cfg.n_heads,
        head_dim=cfg.d_model // cfg.n_heads,
        qkv_bias=True,
        attn_out_bias=True,
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
    return {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "layer_norm_epsilon": cfg.norm_eps,
        "hidden_dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "apply_residual_connection_post_layernorm": False,
        "pretraining_tp": 1,
        "slow_but_exact": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "seq_length": cfg.max_positions,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
    }


def rules(cfg: Config) -> list[Rule]:
    base = "transformer." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}word_embeddings.weight")]
    out += norm("decoder.embed_norm", f"{base}word_embeddings_layernorm")
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}h.{i}"
        out += norm(f"{ours}.attn_res.norm", f"{theirs}.input_layernorm")
        out += per_head_qkv(
            f"{ours}.attn.qkv", f"{theirs}.self_attention.query_key_value", cfg.n_heads, cfg.head_dim, bias=True
        )
        out += linear(f"{ours}.attn.out", f"{theirs}.self_attention.dense")
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.post_attention_layernorm")
        out += linear(f"{ours}.ffn.up", f"{theirs}.mlp.dense_h_to_4h")
        out += linear(f"{ours}.ffn.down", f"{theirs}.mlp.dense_4h_to_h")
    out += norm("decoder.norm", f"{base}ln_f")
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out += linear("head.proj", "lm_head", bias=False)
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """A stored copy of a tied head."""
    return (r"lm_head\.weight",) if cfg.tie_embeddings else ()


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
