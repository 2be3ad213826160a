"""What Qwen3-Next (`qwen3_next`) and Qwen3.5's text model (`qwen3_5_text`) share: a decoder whose layers mix tokens
by gated DeltaNet (`linear_attention`) or by gated attention (`full_attention`), as `layer_types` says (by default
three linear-attention layers, then one full-attention layer: `full_attention_interval` 4).

Every layer: x + mixer(norm(x)), then x + feed-forward(norm(x)). The norms (before each sub-layer, the final one and
the per-head QK-norm) are zero-centred RMSNorms, x / rms(x) * (1 + w) in float32 (`norm="rmsnorm_unit_offset"`).
  linear_attention: `posformer.modules.gated_deltanet` (`Config.mixer="gated_deltanet"` on those layers through
    `layer_settings`), sized by `linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`,
    `linear_value_head_dim`, `linear_conv_kernel_dim` (`Config.gated_deltanet`; chunks of 64 tokens, as
    transformers' chunked rule); no position encoding.
  full_attention: GQA with per-head QK-norm before RoPE on the first `partial_rotary_factor` of each head (0.25 when
    the config gives none, as transformers; `rotary_fraction`, layout "half"), each head's output times the sigmoid
    of a gate (`Config.attention_output_gate`); `q_proj` holds each head's query rows then its gate rows, which
    `gated_attention_rules` moves to the end of posformer's fused `qkv`; `attention_bias` on q/k/v/o.
The feed-forward is the family's own (dense SwiGLU, or Qwen3-Next's experts). transformers runs `hidden_act` in the
linear-attention layers' convolution too, where posformer's gated DeltaNet always runs SiLU: another `hidden_act` is
refused. The multi-token prediction weights (`mtp.*`) the published checkpoints store are not part of the
forward: transformers drops them on load (`_keys_to_ignore_on_load_unexpected`), and posformer too (logged).
"""

from __future__ import annotations

import logging
from typing import Callable

import torch
from torch import Tensor

from posformer.config import Config
from posformer.hf.decoder_fields import causal_lm_fields
from posformer.hf.family import unsupported
from posformer.hf.gated_deltanet import gated_deltanet_rules
from posformer.hf.layout import require_decoder_layout
from posformer.hf.llama import llama_like_to_hf
from posformer.hf.mapping import Rule, linear, norm
from posformer.hf.mixtral import decoder_layer_rules
from posformer.hf.rope import partial_rope_params, rope_to_hf
from posformer.utils.validation import is_int

LINEAR, FULL = "linear_attention", "full_attention"
LAYER_SETTINGS = {LINEAR: {"mixer": "gated_deltanet"}}
DEFAULT_ROTARY_FRACTION = 0.25  # transformers' partial_rotary_factor when the config gives none
CHUNK_SIZE = 64  # transformers' chunked gated delta rule (torch fallback and flash-linear-attention)
MTP_PREFIX = "mtp."

log = logging.getLogger(__name__)


def layer_types(hf: dict, model_type: str) -> list[str]:
    """Each layer's type: `layer_types`, else every `full_attention_interval`-th layer (default 4) full attention."""
    n, given = hf["num_hidden_layers"], hf.get("layer_types")
    if given is None:
        interval = hf.get("full_attention_interval", 4)
        if not is_int(interval) or interval < 1:
            raise unsupported(model_type, f"full_attention_interval={interval!r} (expected an integer >= 1)")
        return [LINEAR if (i + 1) % interval else FULL for i in range(n)]
    if len(given) != n or any(kind not in (LINEAR, FULL) for kind in given):
        raise unsupported(model_type, f"layer_types={given!r} (expected {n} of {LINEAR!r} and {FULL!r}, one per layer)")
    return list(given)


def _deltanet_sizes(hf: dict) -> dict:
    return {
        "key_heads": hf.get("linear_num_key_heads", 16),
        "value_heads": hf.get("linear_num_value_heads", 32),
        "key_dim": hf.get("linear_key_head_dim", 128),
        "value_dim": hf.get("linear_value_head_dim", 128),
        "conv_kernel": hf.get("linear_conv_kernel_dim", 4),
        "chunk_size": CHUNK_SIZE,
    }


def hybrid_fields(hf: dict, model_type: str, d_ff: int, kv_heads: int) -> dict:
    """The `Config` fields both families read alike (`d_ff`, `kv_heads`: the family's defaults of
    `intermediate_size` and `num_key_value_heads`)."""
    activation = hf.get("hidden_act", "silu")
    if activation != "silu":
        raise unsupported(
            model_type, f"hidden_act={activation!r} (the linear-attention layers' convolution runs it: only 'silu')"
        )
    types = layer_types(hf, model_type)
    hybrid = LINEAR in types
    bias = bool(hf.get("attention_bias", False))
    return dict(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads", kv_heads),
        d_head=hf.get("head_dim", 256),
        d_ff=hf.get("intermediate_size", d_ff),
        position="rope",
        position_params=partial_rope_params(hf, DEFAULT_ROTARY_FRACTION),
        max_positions=hf.get("max_position_embeddings", 32768),
        norm="rmsnorm_unit_offset",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_placement="pre",
        activation="swiglu",
        attention_dropout=hf.get("attention_dropout", 0.0),
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        qk_norm=True,
        attention_output_gate=True,
        layer_types=types if hybrid else None,
        layer_settings={LINEAR: dict(LAYER_SETTINGS[LINEAR])} if hybrid else {},
        gated_deltanet=_deltanet_sizes(hf) if hybrid else None,
        **causal_lm_fields(hf, model_type),
    )


def hybrid_to_hf(cfg: Config, model_type: str, name: str, model: str | None = None) -> dict:
    """The HF fields both families write alike (`name`: the architectures' prefix, `model` the base model's class),
    after refusing by name what neither can express. RoPE in v4's keys, `partial_rotary_factor` always written."""
    require_decoder_layout(
        cfg,
        model_type,
        norm="rmsnorm_unit_offset",
        activation="swiglu",
        ffn_bias=False,
        attn_out_bias=cfg.qkv_bias,
        qk_norm=True,
        qk_norm_over="head",
        qk_norm_kind="norm",
        attention_output_gate=True,
        key_smear=False,
        sliding_window=None,
        attention_chunk=None,
        query_temperature=None,
        values_from_keys=False,
        value_norm=False,
        kv_sources=None,
        logit_softcap=None,
        per_layer_inputs=None,
        layer_scalars=False,
    )
    types = cfg.layer_types or [FULL] * cfg.n_layers
    settings = LAYER_SETTINGS if LINEAR in types else {}
    if any(kind not in (LINEAR, FULL) for kind in types) or cfg.layer_settings != settings:
        raise unsupported(
            model_type,
            f"Config.layer_types={cfg.layer_types!r} with layer_settings={cfg.layer_settings!r} (expected "
            f"{LINEAR!r} and {FULL!r} layers, layer_settings={LAYER_SETTINGS!r}) (to_hf)",
        )
    if cfg.position_params.get("layout") != "half" or abs(cfg.scale - cfg.head_dim**-0.5) > 1e-12:
        raise unsupported(model_type, "RoPE's interleaved layout, or an attention scale other than head_dim ** -0.5")
    params = dict(cfg.position_params)
    params.pop("mrope_section", None)
    params.pop("mrope_interleaved", None)
    rope = rope_to_hf(cfg.replace(position_params=params), partial=True)
    sizes = cfg.gated_deltanet or _deltanet_sizes({})
    return {
        **llama_like_to_hf(cfg, model_type, name, model),
        **rope,
        "partial_rotary_factor": float(params.get("rotary_fraction", 1.0)),
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "layer_types": types,
        "linear_num_key_heads": sizes["key_heads"],
        "linear_num_value_heads": sizes["value_heads"],
        "linear_key_head_dim": sizes["key_dim"],
        "linear_value_head_dim": sizes["value_dim"],
        "linear_conv_kernel_dim": sizes["conv_kernel"],
    }


def gated_attention_rules(cfg: Config, ours: str, theirs: str) -> list[Rule]:
    """One full-attention layer: `q_proj` rows (H, [query (dh), gate (dh)]) with `k_proj` and `v_proj` -> our fused
    `qkv` rows [queries (H dh), keys, values, gates (H dh)] (weight and, with `attention_bias`, bias); QK-norm,
    `o_proj`."""
    heads, dh = cfg.n_heads, cfg.head_dim
    kv = cfg.kv_heads * dh

    def to_ours(ts: list[Tensor]) -> Tensor:
        query_then_gate = ts[0].unflatten(0, (heads, 2, dh))  # (H, 2, dh, ...)
        return torch.cat([query_then_gate[:, 0].flatten(0, 1), ts[1], ts[2], query_then_gate[:, 1].flatten(0, 1)])

    def to_theirs(t: Tensor) -> list[Tensor]:
        q, k, v, gate = t.split((heads * dh, kv, kv, heads * dh))
        return [torch.stack([q.unflatten(0, (heads, dh)), gate.unflatten(0, (heads, dh))], dim=1).flatten(0, 2), k, v]

    attn = f"{theirs}.self_attn"
    kinds = ("weight", "bias") if cfg.qkv_bias else ("weight",)
    projections = ("q_proj", "k_proj", "v_proj")
    out = [
        Rule(f"{ours}.attn.qkv.{kind}", tuple(f"{attn}.{p}.{kind}" for p in projections), to_ours, to_theirs)
        for kind in kinds
    ]
    out += norm(f"{ours}.attn.q_norm", f"{attn}.q_norm", bias=False)
    out += norm(f"{ours}.attn.k_norm", f"{attn}.k_norm", bias=False)
    return out + linear(f"{ours}.attn.out", f"{attn}.o_proj", cfg.attn_out_bias)


def hybrid_rules(cfg: Config, ffn: Callable[[str, str, int], list[Rule]]) -> list[Rule]:
    """The weight rules of the whole decoder (`decoder_layer_rules`): each layer's mixer (gated DeltaNet under
    Qwen3.5's names, `linear_attn`; or gated attention, `self_attn`) and `ffn(ours, theirs, layer)`, the family's
    feed-forward."""
    kinds = cfg.layer_types or [FULL] * cfg.n_layers

    def layer(ours: str, theirs: str, i: int) -> list[Rule]:
        if kinds[i] == LINEAR:
            mixer = gated_deltanet_rules(f"{ours}.attn", f"{theirs}.linear_attn")
        else:
            mixer = gated_attention_rules(cfg, ours, theirs)
        return mixer + ffn(ours, theirs, i)

    return decoder_layer_rules(cfg, layer)


def without_mtp(state: dict[str, Tensor], model_type: str) -> dict[str, Tensor]:
    """`state` without the multi-token prediction weights (`mtp.*`), which transformers does not load either."""
    dropped = [key for key in state if key.startswith(MTP_PREFIX)]
    if dropped:
        log.info(
            "%s: not loaded (multi-token prediction weights, as transformers): %d tensors", model_type, len(dropped)
        )
    return {key: tensor for key, tensor in state.items() if not key.startswith(MTP_PREFIX)}


def ignore(cfg: Config) -> tuple[str, ...]:
    """Rotary buffers of old checkpoints, and a stored copy of a tied head."""
    return (r".*rotary_emb\.inv_freq",) + ((r"lm_head\.weight",) if cfg.tie_embeddings else ())
