"""`check_config`: `Config.validate`, every field checked, with an error naming the first invalid one; and the
choices the fields take."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from posformer import positions
from posformer.config.experts import check_experts
from posformer.config.kv_sharing import check_kv_sharing
from posformer.config.latent import check_latent_attention
from posformer.config.layers import check_layer_types
from posformer.config.linear_attention import check_gated_deltanet
from posformer.config.per_layer_inputs import check_per_layer_inputs
from posformer.utils.limits import MODEL_SIZES
from posformer.utils.validation import check_choice, check_field_kinds, check_int, check_number, fail, is_int, is_number

if TYPE_CHECKING:
    from posformer.config import Config

ARCHS = ("encoder", "decoder", "encoder_decoder")
NORMS = ("layernorm", "rmsnorm", "rmsnorm_unit_offset", "deepnorm")
NORM_PLACEMENTS = ("post", "pre", "sandwich", "output")
QK_NORM_OVER = ("head", "projection")
QK_NORM_KINDS = ("norm", "l2")  # the config's `norm` with its weights, or Llama 4's weightless L2 norm
ATTN_IMPLS = ("sdpa", "eager", "flex")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swish", "silu", "glu", "swiglu", "geglu", "geglu_tanh", "reglu")
INITS = ("normal", "t5")
MLM_HEADS = ("bert", "lm")  # BERT's masked-LM head, or one that follows head_transform and head_bias
HEADS = ("causal_lm", "masked_lm", "seq2seq_lm", "span_qa", "classification", "none")
DEFAULT_HEAD = {"encoder": "masked_lm", "decoder": "causal_lm", "encoder_decoder": "seq2seq_lm"}
# whether each stack an arch builds is causal, the decoder first (what an encoding's `check_config` is told)
STACKS_CAUSAL = {"encoder": (False,), "decoder": (True,), "encoder_decoder": (True, False)}


def _fail(name: str, value: Any, expected: str) -> NoReturn:
    """`fail` with the `Config.` prefix: `Config.{name}={value!r} is invalid: expected {expected}`."""
    fail(f"Config.{name}", value, expected)


def _check_token_id(name: str, value: Any) -> None:
    """None or an integer >= 0: an id outside the vocabulary is metadata here (see `Config`)."""
    if value is not None and not (is_int(value) and value >= 0):
        _fail(name, value, "None or a token id (an integer >= 0)")


def check_config(cfg: Config) -> None:
    """Raise `ValueError` naming the first invalid field of `cfg`; resolves its position parameters and per-layer
    settings on the way (`Config.validate`)."""
    flags = tuple(f.name for f in dataclasses.fields(cfg) if f.type in ("bool", "bool | None"))
    check_field_kinds(cfg, "Config.", flags)  # before they steer the checks below
    _check_choices(cfg)
    _check_position(cfg)
    _check_sizes(cfg)
    _check_attention(cfg)
    _check_norms_and_heads(cfg)
    _check_stacks(cfg)
    check_field_kinds(cfg, "Config.")


def _check_choices(cfg: Config) -> None:
    """The fields that take one of a few names (`arch`, `norm`, ..., `head`)."""
    for name, allowed in (
        ("arch", ARCHS),
        ("norm", NORMS),
        ("norm_placement", NORM_PLACEMENTS),
        ("qk_norm_over", QK_NORM_OVER),
        ("qk_norm_kind", QK_NORM_KINDS),
        ("activation", ACTIVATIONS),
        ("attn_impl", ATTN_IMPLS),
        ("init", INITS),
        ("mlm_head", MLM_HEADS),
    ):
        check_choice(f"Config.{name}", getattr(cfg, name), allowed)
    if cfg.head is not None and cfg.head not in HEADS:
        _fail("head", cfg.head, f"one of {', '.join(HEADS)} (or None for the arch's default)")
    if cfg.head_kind == "seq2seq_lm" and cfg.arch != "encoder_decoder":
        _fail("head", cfg.head, "seq2seq_lm only with arch='encoder_decoder'")


def _check_position(cfg: Config) -> None:
    """`position`, its resolved `position_params`, and whether the arch and the kernel can use it."""
    if cfg.position not in positions.names():
        _fail("position", cfg.position, f"one of {', '.join(positions.names())}")
    if not isinstance(cfg.position_params, Mapping):
        _fail("position_params", cfg.position_params, "a dict of the encoding's parameters")
    cfg.position_params = positions.get(cfg.position).resolve_params(cfg.position_params)
    if positions.get(cfg.position).causal_only and cfg.arch != "decoder":
        _fail(
            "position",
            cfg.position,
            f"an encoding of bidirectional attention too with arch={cfg.arch!r} "
            f"({cfg.position} counts the keys before each query: arch='decoder' only)",
        )
    unfit = positions.get(cfg.position).flex_unfit() if cfg.attn_impl == "flex" else None
    if unfit is not None:
        flex = ", ".join(name for name in positions.names() if positions.get(name).flex_compatible())
        _fail(
            "attn_impl",
            "flex",
            f"'sdpa' or 'eager' with position={cfg.position!r}: {unfit} (FlexAttention takes: {flex})",
        )


def _check_sizes(cfg: Config) -> None:
    """The sizes and lengths (`vocab_size`, `d_model`, ..., `sink_tokens`, `random_positions`)."""
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_positions", "num_labels"):
        check_int(f"Config.{name}", getattr(cfg, name), maximum=MODEL_SIZES[name])
    for name in (
        "n_decoder_layers",
        "n_kv_heads",
        "d_head",
        "d_ff",
        "sliding_window",
        "attention_chunk",
        "random_positions",
    ):
        if getattr(cfg, name) is not None:
            check_int(f"Config.{name}", getattr(cfg, name), maximum=MODEL_SIZES[name])
    for name in ("type_vocab_size", "sink_tokens"):
        check_int(f"Config.{name}", getattr(cfg, name), minimum=0, maximum=MODEL_SIZES[name])
    if cfg.sink_tokens and cfg.arch != "decoder":
        _fail("sink_tokens", cfg.sink_tokens, f"0 with arch={cfg.arch!r} (sink tokens lead a decoder's input)")
    positions.check_query_temperature("Config.query_temperature", cfg.query_temperature)
    encoding = positions.get(cfg.position)
    longest = encoding.max_length(cfg.position_params, cfg.max_positions)
    longest = longest or (None if encoding.extrapolates else cfg.max_positions)
    if cfg.random_positions is not None and longest is not None and cfg.random_positions > longest:
        _fail(
            "random_positions",
            cfg.random_positions,
            f"at most {longest}, the positions "
            f"position={cfg.position!r} can represent (max_positions={cfg.max_positions})",
        )


def _check_attention(cfg: Config) -> None:
    """The attention's options: sinks, windows and chunks, heads, dropouts."""
    if cfg.attention_sinks and cfg.attn_impl == "flex":
        _fail("attention_sinks", True, "False with attn_impl='flex' (the sinks run the eager kernel)")
    if cfg.attention_sinks and positions.get(cfg.position).attention is positions.AttentionKind.OWN_WEIGHTS:
        _fail("attention_sinks", True, f"False with position={cfg.position!r}, whose weights are no softmax")
    if cfg.attention_chunk is not None and cfg.arch == "encoder":
        _fail("attention_chunk", cfg.attention_chunk, "None with arch='encoder' (it limits causal self-attention)")
    if cfg.d_head is None and cfg.d_model % cfg.n_heads != 0:
        _fail("n_heads", cfg.n_heads, f"a divisor of d_model={cfg.d_model} (or set d_head)")
    if cfg.n_heads % cfg.kv_heads != 0:
        _fail("n_kv_heads", cfg.n_kv_heads, f"a divisor of n_heads={cfg.n_heads}")
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        check_number(f"Config.{name}", getattr(cfg, name), 0.0, 1.0, high_open=True)
    if cfg.attn_impl == "flex" and cfg.attention_dropout:
        _fail("attention_dropout", cfg.attention_dropout, "0 with attn_impl='flex' (FlexAttention has no dropout)")


def _check_norms_and_heads(cfg: Config) -> None:
    """The norms, the init, the scales and the output head's options."""
    for name in ("norm_eps", "init_std"):
        check_number(f"Config.{name}", getattr(cfg, name), 0.0, low_open=True)
    check_number("Config.logit_scale", cfg.logit_scale, 0.0, low_open=True)
    if cfg.logit_softcap is not None:
        check_number("Config.logit_softcap", cfg.logit_softcap, 0.0, low_open=True)
    if cfg.logit_scale != 1 and (cfg.head_bias or cfg.head_transform):
        _fail("logit_scale", cfg.logit_scale, "1 with an LM head bias or transform (it scales the head's input)")
    if not cfg.first_attn_norm and cfg.norm_placement != "pre":
        _fail("first_attn_norm", False, "True unless norm_placement='pre' (it leaves out a pre-norm)")
    if cfg.attn_scale is not None and not (is_number(cfg.attn_scale) and cfg.attn_scale > 0):
        _fail("attn_scale", cfg.attn_scale, "a number > 0, or None for 1/sqrt(d_head)")
    if cfg.qk_norm_over != "head" and not cfg.qk_norm:
        _fail(
            "qk_norm_over",
            cfg.qk_norm_over,
            "'head' unless qk_norm=True (it says what QK-norm normalises; there is none)",
        )
    if cfg.qk_norm_kind != "norm" and not cfg.qk_norm:
        _fail("qk_norm_kind", cfg.qk_norm_kind, "'norm' unless qk_norm=True (it says how QK-norm normalises)")
    if cfg.parallel_residual and (cfg.norm_placement != "pre" or cfg.arch == "encoder_decoder"):
        _fail("parallel_residual", True, "False unless norm_placement='pre' and arch is 'encoder' or 'decoder'")
    if cfg.pointer_generator not in (True, False):
        _fail("pointer_generator", cfg.pointer_generator, "True or False")
    if cfg.pointer_generator and cfg.head_kind != "seq2seq_lm":
        _fail("pointer_generator", True, f"False with head {cfg.head_kind!r} (it copies into a seq2seq_lm's output)")
    check_number("Config.encoder_span_loss", cfg.encoder_span_loss, low=0)
    if cfg.encoder_span_loss and cfg.head_kind != "seq2seq_lm":
        _fail(
            "encoder_span_loss", cfg.encoder_span_loss, f"0 with head {cfg.head_kind!r} (it trains a seq2seq's encoder)"
        )
    if cfg.separate_decoder_embeddings and cfg.arch != "encoder_decoder":
        _fail("separate_decoder_embeddings", True, "False unless arch='encoder_decoder' (only it has two stacks)")
    if cfg.hf_model_type is not None and not isinstance(cfg.hf_model_type, str):
        _fail("hf_model_type", cfg.hf_model_type, "None or a Hugging Face model_type string")
    if cfg.norm == "deepnorm" and cfg.norm_placement != "post":
        _fail("norm_placement", cfg.norm_placement, "'post' when norm='deepnorm' (DeepNet is post-norm)")
    if cfg.norm == "deepnorm" and cfg.init != "normal":
        _fail("init", cfg.init, "'normal' when norm='deepnorm' (DeepNet has its own init)")


def _check_stacks(cfg: Config) -> None:
    """The token ids, then each stack's encoding, layer types, experts and latent attention."""
    encoding = positions.get(cfg.position)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        _check_token_id(name, getattr(cfg, name))
    # the sizes without the scale, which may derive from the parameters checked here (`OwnAttnScale`)
    sizes = positions.Sizes(cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.max_positions)
    for causal in STACKS_CAUSAL[cfg.arch]:
        encoding.check_config(sizes, cfg.position_params, causal)
    check_layer_types(cfg)
    layers = cfg.layer_configs(cfg.decoder_layers) if cfg.sink_tokens else []
    if any(c.sliding_window or c.attention_chunk for c in layers):
        _fail(
            "sink_tokens",
            cfg.sink_tokens,
            "0 with a sliding_window or attention_chunk, which would hide the sinks from later queries "
            "(position='streaming' keeps its first `sinks` tokens in view)",
        )
    check_experts(cfg)
    check_latent_attention(cfg)
    check_gated_deltanet(cfg)
    check_kv_sharing(cfg)
    check_per_layer_inputs(cfg)

    # ------------------------------------------------------------- round trips
