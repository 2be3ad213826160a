"""The `Config` fields that decoder-only families read alike from a config.json.

    Config(**gated_decoder_fields(hf, "mixtral", norm_eps=1e-5, bos_token_id=1, eos_token_id=2), d_ff=..., ...)
    Config(..., **causal_lm_fields(hf, "gpt_oss"))

Each family passes its own defaults (those of its transformers config class) and adds, or replaces, its own fields:
`llama.llama_like_from_hf` is the LLaMA-layout families' counterpart, which reads `intermediate_size` as `d_ff`.
"""

from __future__ import annotations

from posformer.hf.family import architecture, unsupported
from posformer.hf.llama import GATED, HEADS, first_token_id


def causal_lm_fields(
    hf: dict, model_type: str, *, bos_token_id: int | None = None, eos_token_id: int | list[int] | None = None
) -> dict:
    """Tying, the head (the architecture's suffix: *ForCausalLM, causal_lm; *Model, none), the special ids
    (`bos_token_id`, `eos_token_id`: the family's defaults; the first of a list of eos ids), the initializer range
    and the family's name."""
    return dict(
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        head=architecture(hf, HEADS, "causal_lm"),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id", bos_token_id),
        eos_token_id=first_token_id(hf.get("eos_token_id", eos_token_id)),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=model_type,
    )


def gated_layer_fields(hf: dict, model_type: str, *, norm_eps: float) -> dict:
    """The sizes (GQA, `head_dim` when given), the pre-RMSNorm (`rms_norm_eps`, else `norm_eps`), the gated
    feed-forward's activation (another than silu, gelu or relu refused by name) and attention dropout of a LLaMA-like
    stack of layers, decoder or encoder (EuroBERT)."""
    activation = hf.get("hidden_act", "silu")
    if activation not in GATED:
        raise unsupported(model_type, f"hidden_act={activation!r} (supported: {', '.join(GATED)})")
    return dict(
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        d_head=hf.get("head_dim"),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", norm_eps),
        norm_placement="pre",
        activation=GATED[activation],
        attention_dropout=hf.get("attention_dropout", 0.0),
    )


def gated_decoder_fields(
    hf: dict,
    model_type: str,
    *,
    norm_eps: float,
    bos_token_id: int | None = None,
    eos_token_id: int | list[int] | None = None,
) -> dict:
    """A pre-RMSNorm decoder with a gated feed-forward of `hidden_act` and no FFN biases (Mixtral, Qwen3-MoE,
    GLM-4.5, Llama 4): `gated_layer_fields` and `causal_lm_fields`. The position encoding, `d_ff` and the attention
    biases are the family's own."""
    return dict(
        arch="decoder",
        **gated_layer_fields(hf, model_type, norm_eps=norm_eps),
        ffn_bias=False,
        **causal_lm_fields(hf, model_type, bos_token_id=bos_token_id, eos_token_id=eos_token_id),
    )
