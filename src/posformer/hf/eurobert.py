"""EuroBERT (transformers 5 only): LLaMA's layers as a bidirectional encoder.

Pre-RMSNorm, RoPE (half layout, `rope_parameters` or v4's `rope_theta` / `rope_scaling`, `rope.rope_params`),
a gated FFN of `hidden_act` (SwiGLU by default), grouped-query attention with `attention_bias` on q, k, v and o,
`mlp_bias` on the FFN, and a final RMSNorm; every token sees every other (no causal mask). Heads (from
`architectures`; none given: EuroBertModel): EuroBertModel -> "none"; EuroBertForMaskedLM -> "masked_lm", a
projection alone (`lm_head`, with a bias when `mlp_bias`), untied unless `tie_word_embeddings`
(`Config.mlm_head` "lm"). Sequence and token classification (their own poolings) are refused by name, as is
`pretraining_tp`. `mask_token_id` is the tokenizer's business: it is not kept, and `to_hf` leaves it at the
config class's default.
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.decoder_fields import gated_layer_fields
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.layout import require_default_scale, require_fields
from posformer.hf.llama import HIDDEN_ACT, first_token_id, layer_norms, llama_like_to_hf, separate_projections
from posformer.hf.mapping import Rule, linear, norm, same
from posformer.hf.rope import rope_params, rope_to_hf

MODEL_TYPE = "eurobert"
HEADS = {"EuroBertForMaskedLM": "masked_lm", "EuroBertModel": "none"}
HEAD_CLASSES = {head: name for name, head in HEADS.items()}


def config_from_hf(hf: dict) -> Config:
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise unsupported(MODEL_TYPE, f"tensor-parallel slicing pretraining_tp={hf['pretraining_tp']}")
    attention_bias, mlp_bias = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    return Config(
        arch="encoder",
        **gated_layer_fields(hf, MODEL_TYPE, norm_eps=1e-5),
        d_ff=hf["intermediate_size"],
        position="rope",
        position_params=rope_params(hf),
        max_positions=hf.get("max_position_embeddings", 8192),
        qkv_bias=attention_bias,
        attn_out_bias=attention_bias,
        ffn_bias=mlp_bias,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head=architecture(hf, HEADS, "none"),
        mlm_head="lm",
        head_bias=mlp_bias,
        pad_token_id=hf.get("pad_token_id", 128001),
        bos_token_id=hf.get("bos_token_id", 128000),
        eos_token_id=first_token_id(hf.get("eos_token_id", 128001)),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def config_to_hf(cfg: Config) -> dict:
    layout = (
        cfg.arch == "encoder"
        and cfg.position == "rope"
        and cfg.norm == "rmsnorm"
        and cfg.norm_placement == "pre"
        and cfg.activation in HIDDEN_ACT
        and cfg.layer_types is None
        and cfg.mlm_head == "lm"
        and not (cfg.head_transform or cfg.qk_norm or cfg.embed_norm or cfg.scale_embeddings)
    )
    if not layout:
        raise unsupported(
            MODEL_TYPE,
            "a layout other than EuroBERT's (a RoPE + pre-RMSNorm encoder with a gated FFN, one kind of layer, and "
            "a masked-LM head that is a projection alone) (to_hf)",
        )
    if cfg.head_kind not in HEAD_CLASSES:
        raise unsupported(MODEL_TYPE, f"head={cfg.head_kind!r} (supported: {', '.join(HEAD_CLASSES)}) (to_hf)")
    if cfg.qkv_bias != cfg.attn_out_bias or (cfg.head_kind == "masked_lm" and cfg.head_bias != cfg.ffn_bias):
        raise unsupported(
            MODEL_TYPE, "biases other than attention_bias on q, k, v and o, and mlp_bias on the FFN and head (to_hf)"
        )
    require_fields(
        cfg,
        MODEL_TYPE,
        use_final_norm=True,
        first_attn_norm=True,
        parallel_residual=False,
        sliding_window=None,
        type_vocab_size=0,
    )
    require_default_scale(cfg, MODEL_TYPE)
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "EuroBert"),
        "architectures": [HEAD_CLASSES[cfg.head_kind]],
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "mlp_bias": cfg.ffn_bias,
        **rope_to_hf(cfg),
    }


def rules(cfg: Config) -> list[Rule]:
    base = "model." if cfg.head_kind == "masked_lm" else ""
    projections = separate_projections(cfg)
    out = [same("embed_tokens.weight", f"{base}embed_tokens.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{base}layers.{i}"
        out += layer_norms(ours, theirs)
        out += projections(ours, theirs)
        out += linear(f"{ours}.attn.out", f"{theirs}.self_attn.o_proj", cfg.attn_out_bias)
        out += linear(f"{ours}.ffn.down", f"{theirs}.mlp.down_proj", cfg.ffn_bias)
    out += norm("encoder.norm", f"{base}norm", bias=False)
    if cfg.head_kind == "masked_lm":
        out += [same("head.proj.bias", "lm_head.bias")] if cfg.head_bias else []
        out += [] if cfg.tie_embeddings else [same("head.proj.weight", "lm_head.weight")]
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """A stored copy of a tied head."""
    return (r"lm_head\.weight",) if cfg.tie_embeddings else ()


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
