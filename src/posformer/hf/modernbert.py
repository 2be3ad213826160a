"""ModernBERT: a pre-LayerNorm encoder with RoPE, a gated FFN, and global and local layers.

LayerNorm without biases (`norm_bias`) normalises the token embeddings, the input of each sub-layer (but the first
layer's attention, whose input the embedding norm has just normalised: `Config.first_attn_norm` False) and the
output. The FFN is a GLU fused in `Wi` (its first half through `hidden_activation`, times the second); `Wqkv` holds
q, k and v. Every `global_attn_every_n_layers`-th layer from the first is global, the others local (or as
`layer_types` says, transformers 5): a local layer sees the tokens at most `local_attention // 2` away on either
side (`Config.sliding_window` W = local_attention // 2 + 1 of a bidirectional window) and rotates with its own
base, `local_rope_theta` (None: the global one), a global one with `global_rope_theta`; transformers 5 writes
both as `rope_parameters` nested by layer type, which is read (`rope.rope_params`), or written on request
(`to_hf(rope_parameters=True)`). A `rope_scaling` applies to both, as in transformers 4.57.6 and 5.

Heads (from `architectures`; none given: ModernBertModel): ModernBertModel -> "none"; ModernBertForMaskedLM ->
"masked_lm", the prediction head (`head.dense`, `classifier_activation`, `head.norm`) and the `decoder`, tied to
the embeddings, with a bias (`decoder_bias`); ModernBertForQuestionAnswering -> "span_qa", the same prediction
head and a `classifier` of two logits. Every head keeps `Config.head_transform`, so a span head started from a
base or masked-LM checkpoint (`from_hf(..., head="span_qa")`, `qa train --head span`) is ModernBERT's. Other heads
(sequence and token classification, multiple choice: other poolings) and `partial_rotary_factor` are refused by
name. A config that only transformers 5 reads (its own layer pattern, or another scaling per layer type) is
refused for a transformers 4 export.
"""

from __future__ import annotations

from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.bert import num_labels
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.infer_family import differing_fields
from posformer.hf.layer_kinds import GLOBAL, LOCAL, checked_layer_types
from posformer.hf.mapping import Rule, linear, norm, same
from posformer.hf.rope import has_v5_layer_params, rope_params, rope_to_hf, v5_rope_parameters
from posformer.hf.versions import writer_major

MODEL_TYPE = "modernbert"
HEADS = {"ModernBertForMaskedLM": "masked_lm", "ModernBertForQuestionAnswering": "span_qa", "ModernBertModel": "none"}
HEAD_CLASSES = {head: name for name, head in HEADS.items()}
ACTIVATIONS = {
    "gelu": "geglu",
    "gelu_pytorch_tanh": "geglu_tanh",
    "gelu_new": "geglu_tanh",
    "gelu_fast": "geglu_tanh",
    "silu": "swiglu",
    "swish": "swiglu",
    "relu": "reglu",
}
HF_ACTIVATIONS = {"geglu": "gelu", "geglu_tanh": "gelu_pytorch_tanh", "swiglu": "silu", "reglu": "relu"}
THETAS = {GLOBAL: ("global_rope_theta", 160000.0), LOCAL: ("local_rope_theta", 10000.0)}  # transformers' defaults


def window_of(local_attention: int) -> int:
    """`Config.sliding_window` of a local layer: keys at most local_attention // 2 slots away on either side."""
    return local_attention // 2 + 1


def _layer_types(hf: dict) -> list[str]:
    """`layer_types` (transformers 5), else every `global_attn_every_n_layers`-th layer (3) global from the first."""
    layers = hf["num_hidden_layers"]
    types = hf.get("layer_types")
    if not types:
        every = hf.get("global_attn_every_n_layers", 3)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise unsupported(MODEL_TYPE, f"global_attn_every_n_layers={every!r} (expected an integer >= 1)")
        types = [GLOBAL if i % every == 0 else LOCAL for i in range(layers)]
    return checked_layer_types(types, layers, MODEL_TYPE)


def _rope(hf: dict, layer_type: str) -> dict:
    """The RoPE of `layer_type`'s layers: its `rope_parameters` entry, else the v4 base (the local one None: the
    global one) with the config's `rope_scaling`."""
    if has_v5_layer_params(hf, layer_type):
        params = rope_params(hf, layer_type=layer_type)
    else:
        v4 = {key: value for key, value in hf.items() if key != "rope_parameters"}
        key, default = THETAS[layer_type]
        theta = hf.get(key, default)
        if theta is None and layer_type == LOCAL:
            theta = hf.get("global_rope_theta", THETAS[GLOBAL][1])
        params = rope_params({**v4, "rope_theta": theta})
    if params.get("rotary_fraction", 1.0) != 1.0:
        raise unsupported(MODEL_TYPE, f"partial_rotary_factor={params['rotary_fraction']} (it rotates whole heads)")
    return params


def config_from_hf(hf: dict) -> Config:
    head = architecture(hf, HEADS, "none")
    if head == "span_qa" and num_labels(hf) != 2:
        raise unsupported(MODEL_TYPE, f"a question-answering head with num_labels={num_labels(hf)} (expected 2)")
    activation = hf.get("hidden_activation", "gelu")
    if activation not in ACTIVATIONS:
        raise unsupported(MODEL_TYPE, f"hidden_activation={activation!r} (supported: {', '.join(ACTIVATIONS)})")
    if hf.get("classifier_activation", "gelu") != "gelu":
        raise unsupported(MODEL_TYPE, f"classifier_activation={hf['classifier_activation']!r} (supported: 'gelu')")
    local_attention = hf.get("local_attention", 128)
    if hf.get("sliding_window") not in (None, local_attention // 2):  # transformers 5 reads it as half the window
        raise unsupported(MODEL_TYPE, f"sliding_window={hf['sliding_window']} with local_attention={local_attention}")
    flat = hf.get("rope_parameters")
    if isinstance(flat, dict) and flat and not any(isinstance(value, dict) for value in flat.values()):
        raise unsupported(MODEL_TYPE, "rope_parameters not nested by layer type (transformers 5 refuses it too)")
    types = _layer_types(hf)
    local = {"sliding_window": window_of(local_attention), "position_params": _rope(hf, LOCAL)}
    attention_bias = bool(hf.get("attention_bias", False))
    return Config(
        arch="encoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        position="rope",
        position_params=_rope(hf, GLOBAL),
        max_positions=hf.get("max_position_embeddings", 8192),
        layer_types=types,
        layer_settings={LOCAL: local} if LOCAL in types else {},
        norm="layernorm",
        norm_eps=hf.get("norm_eps", 1e-5),
        norm_bias=bool(hf.get("norm_bias", False)),
        norm_placement="pre",
        embed_norm=True,
        first_attn_norm=False,
        activation=ACTIVATIONS[activation],
        dropout=hf.get("embedding_dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("mlp_dropout", 0.0),
        qkv_bias=attention_bias,
        attn_out_bias=attention_bias,
        ffn_bias=bool(hf.get("mlp_bias", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        head=head,
        head_transform=True,
        head_transform_bias=bool(hf.get("classifier_bias", False)),
        mlm_head="lm",
        head_bias=bool(hf.get("decoder_bias", True)),
        pad_token_id=hf.get("pad_token_id", 50283),
        bos_token_id=hf.get("bos_token_id", 50281),
        eos_token_id=hf.get("eos_token_id", 50282),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def _every_nth(types: list[str]) -> int | None:
    """n when the global layers are exactly every n-th from the first (transformers 4.57.6's only pattern)."""
    later = [i for i, kind in enumerate(types) if kind == GLOBAL and i > 0]
    every = later[0] if later else len(types)
    fits = types == [GLOBAL if i % every == 0 else LOCAL for i in range(len(types))]
    return every if fits else None


def _layers_to_hf(cfg: Config) -> dict:
    """`layer_types`, `global_attn_every_n_layers` (where the pattern has one), `local_attention` and the RoPE of
    both kinds: v4's keys when the kinds differ in their base alone, else `rope_parameters` by layer type."""
    types, local = [], None
    for layer in cfg.layer_configs(cfg.n_layers):
        if layer.sliding_window is None and layer.position_params == cfg.position_params:
            types.append(GLOBAL)
            continue
        own = (layer.sliding_window, layer.position_params)
        if layer.sliding_window is None or layer.position != "rope" or local not in (None, own):
            raise unsupported(
                MODEL_TYPE,
                "layers other than global ones (the config's RoPE, no window) and local ones (one "
                "window, one RoPE) (to_hf)",
            )
        local = own
        types.append(LOCAL)
    window, local_params = local if local is not None else (window_of(128), cfg.position_params)
    full = rope_to_hf(cfg)
    sliding = rope_to_hf(cfg.replace(position_params=local_params))
    out = {"layer_types": types, "local_attention": 2 * (window - 1)}
    every = _every_nth(types)
    if every is not None:
        out["global_attn_every_n_layers"] = every
    if full["max_position_embeddings"] != sliding["max_position_embeddings"]:
        raise unsupported(MODEL_TYPE, "global and local RoPE scalings of two original lengths (to_hf)")
    out["max_position_embeddings"] = full["max_position_embeddings"]
    if full["rope_scaling"] == sliding["rope_scaling"]:
        return {
            **out,
            "global_rope_theta": full["rope_theta"],
            "local_rope_theta": sliding["rope_theta"],
            "rope_scaling": full["rope_scaling"],
        }
    nested = {kind: v5_rope_parameters(rope)["rope_parameters"] for kind, rope in ((GLOBAL, full), (LOCAL, sliding))}
    return {**out, "rope_parameters": nested}


def config_to_hf(cfg: Config) -> dict:
    layout = (
        cfg.arch == "encoder"
        and cfg.position == "rope"
        and cfg.norm == "layernorm"
        and cfg.norm_placement == "pre"
        and cfg.embed_norm
        and not cfg.first_attn_norm
        and cfg.activation in HF_ACTIVATIONS
        and cfg.head_transform
        and cfg.mlm_head == "lm"
    )
    if not layout:
        raise unsupported(
            MODEL_TYPE,
            "a layout other than ModernBERT's (pre-LayerNorm encoder with RoPE, a gated FFN, an embedding norm "
            "serving as the first attention's, and the prediction-head transform) (to_hf)",
        )
    if cfg.head_kind not in HEAD_CLASSES:
        raise unsupported(MODEL_TYPE, f"head={cfg.head_kind!r} (supported: {', '.join(HEAD_CLASSES)}) (to_hf)")
    out = {
        "model_type": MODEL_TYPE,
        "architectures": [HEAD_CLASSES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ff_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "hidden_activation": HF_ACTIVATIONS[cfg.activation],
        "norm_eps": cfg.norm_eps,
        "norm_bias": cfg.norm_bias,
        "attention_bias": cfg.qkv_bias,
        "mlp_bias": cfg.ffn_bias,
        "classifier_bias": cfg.head_transform_bias,
        "classifier_activation": "gelu",
        "decoder_bias": cfg.head_bias,
        "embedding_dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "mlp_dropout": cfg.activation_dropout,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "cls_token_id": cfg.bos_token_id,
        "sep_token_id": cfg.eos_token_id,
        **_layers_to_hf(cfg),
    }
    differ = differing_fields(cfg, config_from_hf(out))
    if differ:
        raise unsupported(MODEL_TYPE, f"settings ModernBERT does not have: {', '.join(differ)} (to_hf)")
    return out


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Refuse a transformers 4 export of what 4.57.6 cannot read: a layer pattern other than every n-th layer
    global, or RoPE entries that differ in more than their base (4.57.6 reads neither `layer_types` nor
    `rope_parameters`)."""
    if writer_major(hf, "to_hf") >= 5:
        return
    nested = hf.get("rope_parameters") or {}
    bases_only = len({repr({k: v for k, v in e.items() if k != "rope_theta"}) for e in nested.values()}) <= 1
    if "global_attn_every_n_layers" not in hf or not bases_only:
        raise unsupported(
            MODEL_TYPE,
            "layer types or per-layer-type RoPE that transformers 4.57.6 cannot read (export for transformers 5: "
            "transformers_version='5.24.0') (to_hf)",
        )


def rules(cfg: Config) -> list[Rule]:
    base = "" if cfg.head_kind == "none" else "model."
    bias = cfg.norm_bias
    out = [same("embed_tokens.weight", f"{base}embeddings.tok_embeddings.weight")]
    out += norm("encoder.embed_norm", f"{base}embeddings.norm", bias)
    for i in range(cfg.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{base}layers.{i}"
        if i > 0:
            out += norm(f"{ours}.attn_res.norm", f"{theirs}.attn_norm", bias)
        out += linear(f"{ours}.attn.qkv", f"{theirs}.attn.Wqkv", cfg.qkv_bias)
        out += linear(f"{ours}.attn.out", f"{theirs}.attn.Wo", cfg.attn_out_bias)
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.mlp_norm", bias)
        out += linear(f"{ours}.ffn.up", f"{theirs}.mlp.Wi", cfg.ffn_bias)
        out += linear(f"{ours}.ffn.down", f"{theirs}.mlp.Wo", cfg.ffn_bias)
    out += norm("encoder.norm", f"{base}final_norm", bias)
    if cfg.head_kind in ("masked_lm", "span_qa"):
        out += linear("head.dense", "head.dense", cfg.head_transform_bias)
        out += norm("head.norm", "head.norm", bias)
    if cfg.head_kind == "masked_lm":
        out += [same("head.proj.bias", "decoder.bias")] if cfg.head_bias else []
        out += [] if cfg.tie_embeddings else [same("head.proj.weight", "decoder.weight")]
    elif cfg.head_kind == "span_qa":
        out += linear("head.proj", "classifier")
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """A stored copy of the tied decoder."""
    return (r"decoder\.weight",) if cfg.tie_embeddings else ()


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, finish_export=finish_export))
