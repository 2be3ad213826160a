"""GPT-2: learned positions, pre-LayerNorm, tanh-GELU MLP, biases everywhere, tied head.

Hugging Face stores GPT-2's linears as `Conv1D` with weights (in, out): every
projection is transposed on the way in and out. `c_attn` is the fused q/k/v
projection, its output columns [q; k; v] exactly as posformer's `attn.qkv` rows.
Heads: GPT2LMHeadModel (causal_lm) and GPT2Model (none).
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.activations import activation_from_hf, activation_to_hf
from posformer.hf.family import Family, UnsupportedCheckpoint, architecture, register, unsupported
from posformer.hf.layout import PLAIN_LAYERS, require_fields, require_head
from posformer.hf.mapping import Rule, linear, norm, same, transposed

MODEL_TYPE = "gpt2"
HEADS = {"GPT2LMHeadModel": "causal_lm", "GPT2Model": "none"}
ARCHITECTURES = {head: name for name, head in HEADS.items()}


def _check_features(hf: dict) -> None:
    if hf.get("scale_attn_by_inverse_layer_idx", False):
        raise unsupported(MODEL_TYPE, "scale_attn_by_inverse_layer_idx=True (attention scaled by 1/(layer+1))")
    if hf.get("add_cross_attention", False):
        raise unsupported(MODEL_TYPE, "add_cross_attention=True (cross-attention in a decoder-only GPT-2)")


def config_from_hf(hf: dict) -> Config:
    """HF GPT2Config dict -> `Config`.

    `reorder_and_upcast_attn` only changes the order of float operations (q.k in
    float32, scaled inside the product): the same function, so it is accepted.
    """
    _check_features(hf)
    d_model = hf.get("n_embd", 768)
    return Config(
        arch="decoder",
        vocab_size=hf.get("vocab_size", 50257),
        d_model=d_model,
        n_layers=hf.get("n_layer", 12),
        n_heads=hf.get("n_head", 12),
        d_ff=hf.get("n_inner") or 4 * d_model,
        position="learned",
        max_positions=hf.get("n_positions", 1024),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5),
        norm_placement="pre",
        activation=activation_from_hf(MODEL_TYPE, hf.get("activation_function", "gelu_new")),
        dropout=hf.get("resid_pdrop", 0.1),
        attention_dropout=hf.get("attn_pdrop", 0.1),
        attn_scale=None if hf.get("scale_attn_weights", True) else 1.0,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id", 50256),
        eos_token_id=hf.get("eos_token_id", 50256),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def _scale_attn_weights(cfg: Config) -> bool:
    """GPT-2 scales attention by 1/sqrt(head_dim) or not at all (scale_attn_weights=False)."""
    if cfg.attn_scale is None or abs(cfg.attn_scale - cfg.head_dim**-0.5) < 1e-12:
        return True
    if cfg.attn_scale == 1.0:
        return False
    raise UnsupportedCheckpoint(
        f"to_hf: gpt2 scales attention by 1/sqrt(head_dim) or 1; Config.attn_scale={cfg.attn_scale!r} is neither"
    )


def config_to_hf(cfg: Config) -> dict:
    require_head(cfg, MODEL_TYPE)
    require_fields(
        cfg,
        MODEL_TYPE,
        arch="decoder",
        position="learned",
        norm="layernorm",
        norm_bias=True,
        norm_placement="pre",
        use_final_norm=True,
        embed_norm=False,
        parallel_residual=False,
        kv_heads=cfg.n_heads,
        head_dim=cfg.d_model // cfg.n_heads,
        qkv_bias=True,
        attn_out_bias=True,
        ffn_bias=True,
        scale_embeddings=False,
        type_vocab_size=0,
        head_bias=False,
        scale_tied_head=False,
        **PLAIN_LAYERS,
        head_transform=False,
        first_attn_norm=True,
        decoder_layers=cfg.n_layers,
    )
    if cfg.position_params["offset"] != 0:
        raise UnsupportedCheckpoint(
            f"to_hf: gpt2 reads position p from row p; Config.position_params has "
            f"offset={cfg.position_params['offset']!r}"
        )
    return {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.ff_dim,
        "n_positions": cfg.max_positions,
        "activation_function": activation_to_hf(MODEL_TYPE, cfg.activation),
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.attention_dropout,
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_range": cfg.init_std,
        "scale_attn_weights": _scale_attn_weights(cfg),
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "add_cross_attention": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
    }


def _conv1d(ours: str, theirs: str) -> list[Rule]:
    """A Conv1D (weight (in, out), bias (out,)) as an nn.Linear."""
    return [transposed(f"{ours}.weight", f"{theirs}.weight"), same(f"{ours}.bias", f"{theirs}.bias")]


def rules(cfg: Config) -> list[Rule]:
    base = "transformer." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}wte.weight"), same("decoder.position.table.weight", f"{base}wpe.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}h.{i}"
        out += norm(f"{ours}.attn_res.norm", f"{theirs}.ln_1")
        out += _conv1d(f"{ours}.attn.qkv", f"{theirs}.attn.c_attn")
        out += _conv1d(f"{ours}.attn.out", f"{theirs}.attn.c_proj")
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.ln_2")
        out += _conv1d(f"{ours}.ffn.up", f"{theirs}.mlp.c_fc")
        out += _conv1d(f"{ours}.ffn.down", f"{theirs}.mlp.c_proj")
    out += norm("decoder.norm", f"{base}ln_f")
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out += linear("head.proj", "lm_head", bias=False)
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """The causal-mask buffers of old checkpoints (`attn.bias`, `attn.masked_bias`), and a stored tied head."""
    patterns = [r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias"]
    if cfg.tie_embeddings:
        patterns.append(r"lm_head\.weight")
    return tuple(patterns)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore))
