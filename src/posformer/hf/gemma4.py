"""Gemma 4 (text, `gemma4_text`; transformers 5.x): Gemma 3's layout with per-layer inputs and KV-shared layers.

As in Gemma 3: local layers ("sliding_attention": a window of `sliding_window` tokens and their own RoPE) and
global ones ("full_attention"), by `layer_types` (default: every 6th global; transformers makes the last layer
global whatever the list says, and so does this mapping), the config's own settings being the global layers';
four RMSNorms per layer around attention and the FFN ("sandwich") and one over each head's q and k; GeGLU with
tanh-GELU; token embeddings times sqrt(hidden_size). Unlike Gemma 3:
- RMSNorm scales by its weight, not 1 + weight ("rmsnorm", in float32); the attention scale is 1; each head's
  values are divided by their root mean square, without weights (`v_norm`: `Config.value_norm`).
- RoPE comes as v5's `rope_parameters` by layer type (`posformer.hf.rope`), the global layers' "proportional"
  (p-RoPE). Global layers have their own head width (`global_head_dim`, default 512, which transformers 5.x
  saves as `per_layer_config`: per-layer `d_head` and `n_kv_heads`), and with `attention_k_eq_v` no value
  projection (`Config.values_from_keys`) and `num_global_key_value_heads`.
- Per-layer inputs (`hidden_size_per_layer_input` P > 0: `Config.per_layer_inputs`): `embed_tokens_per_layer`,
  `per_layer_model_projection` and `per_layer_projection_norm` make them; each layer mixes its own in after its
  FFN (`per_layer_input_gate`, `per_layer_projection`, `post_per_layer_input_norm`).
- The last `num_kv_shared_layers` layers read the keys and values of the last earlier layer of their type
  (`Config.kv_sources`; they have no k/v projections or k_norm); with `use_double_wide_mlp` their FFN is twice
  as wide (a per-layer `d_ff`).
- Each layer's output is multiplied by its stored `layer_scalar` (`Config.layer_scalars`); the logits are
  soft-capped by `final_logit_softcapping` (`Config.logit_softcap`).
Heads: Gemma4ForCausalLM (causal_lm), Gemma4TextModel (none). Refused by name: the mixture-of-experts variant
(`enable_moe_block`), bidirectional attention (`use_bidirectional_attention="all"`), `per_layer_config` entries
other than head_dim and num_key_value_heads, and KV sharing over every layer.
"""

from __future__ import annotations

from posformer import positions
from posformer.config import Config
from posformer.hf.family import Family, register, unsupported
from posformer.hf.gemma3 import _sandwich_norms
from posformer.hf.layer_kinds import GLOBAL, LOCAL, layer_types_from_hf
from posformer.hf.layout import require_decoder_layout
from posformer.hf.llama import first_token_id, llama_like_from_hf, llama_like_to_hf
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.rope import has_v5_layer_params, rope_params
from posformer.utils.validation import fail, is_int

MODEL_TYPE = "gemma4_text"
HEADS = {"ForCausalLM": "causal_lm", "TextModel": "none"}
ACTIVATIONS = {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu"}
# transformers' rope_parameters when a config has none
DEFAULT_ROPE = {
    LOCAL: {"rope_type": "default", "rope_theta": 10000.0},
    GLOBAL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
OVERRIDES = {"head_dim": "d_head", "num_key_value_heads": "n_kv_heads"}  # per_layer_config keys -> Config fields
LAYER_FIELDS = ("sliding_window", "position_params", "d_head", "n_kv_heads", "d_ff", "values_from_keys")
WRITES = ("kv_sources", "per_layer_inputs", "layer_scalars", "value_norm", "logit_softcap")
WRITES_PER_LAYER = ("values_from_keys", "d_head", "n_kv_heads", "d_ff")


def _refuse(hf: dict) -> None:
    if hf.get("enable_moe_block"):
        raise unsupported(MODEL_TYPE, "enable_moe_block=True (the mixture-of-experts variant)")
    if hf.get("use_bidirectional_attention") == "all":
        raise unsupported(MODEL_TYPE, "use_bidirectional_attention='all' (bidirectional attention)")
    activation = hf.get("hidden_activation", "gelu_pytorch_tanh")
    if activation not in ACTIVATIONS:
        raise unsupported(MODEL_TYPE, f"hidden_activation={activation!r} (supported: {', '.join(ACTIVATIONS)})")


def _layer_types(hf: dict) -> list[str]:
    """`layer_types` (default: every 6th layer global), the last layer global as transformers makes it."""
    types = layer_types_from_hf(hf, MODEL_TYPE, 6)
    return [*types[:-1], GLOBAL]


def _overrides(hf: dict, types: list[str]) -> dict[int, dict]:
    """Each layer's own head_dim and num_key_value_heads: v5's `per_layer_config`, else (as transformers builds it)
    `global_head_dim` on the global layers, with `num_global_key_value_heads` when `attention_k_eq_v`."""
    given = hf.get("per_layer_config")
    if given is None:
        override = {"head_dim": hf.get("global_head_dim", 512)}
        if hf.get("attention_k_eq_v") and hf.get("num_global_key_value_heads") is not None:
            override["num_key_value_heads"] = hf["num_global_key_value_heads"]
        return {i: override for i, kind in enumerate(types) if kind == GLOBAL}
    if not isinstance(given, dict):
        fail("per_layer_config", given, "an object from layer indices to their head_dim and num_key_value_heads")
    out = {}
    for key, settings in given.items():
        index = int(key) if isinstance(key, (int, str)) and str(key).isdigit() else -1
        if not 0 <= index < len(types) or not isinstance(settings, dict):
            fail(f"per_layer_config[{key!r}]", settings, f"the overrides of a layer index below {len(types)}")
        if set(settings) - set(OVERRIDES):
            raise unsupported(MODEL_TYPE, f"per_layer_config[{key!r}] setting {', '.join(sorted(settings))}")
        for name, value in settings.items():
            if not is_int(value) or value < 1:
                fail(f"per_layer_config[{key!r}][{name!r}]", value, "an integer >= 1")
        out[index] = settings
    return out


def _kv_sources(hf: dict, types: list[str]) -> list[int | None] | None:
    """The last `num_kv_shared_layers` layers read the keys and values of the last earlier layer of their type."""
    shared, n = hf.get("num_kv_shared_layers") or 0, len(types)
    if not shared:
        return None
    if not 0 < shared < n:
        raise unsupported(MODEL_TYPE, f"num_kv_shared_layers={shared} of {n} layers (KV sharing over every layer)")
    first = n - shared
    sources: list[int | None] = [None] * n
    for i in range(first, n):
        earlier = [j for j in range(first) if types[j] == types[i]]
        if not earlier:
            raise unsupported(MODEL_TYPE, f"num_kv_shared_layers={shared}: no {types[i]} layer before layer {first}")
        sources[i] = earlier[-1]
    return sources


def _rope(hf: dict, layer_type: str) -> dict:
    """The `position_params` of one layer type, from its entry of `rope_parameters` (transformers' defaults
    without them)."""
    if not isinstance(hf.get("rope_parameters"), dict):
        hf = {**hf, "rope_parameters": DEFAULT_ROPE}
    if not has_v5_layer_params(hf, layer_type):
        raise unsupported(MODEL_TYPE, f"rope_parameters without an entry for {layer_type!r}")
    params = rope_params(hf, layer_type=layer_type)
    if "rotary_fraction" in params:  # Gemma 4 rotates the whole head unless its RoPE is proportional
        raise unsupported(MODEL_TYPE, f"rope_parameters[{layer_type!r}] with partial rotation (not 'proportional')")
    return params


def _layer_fields(hf: dict, types: list[str], sources: list[int | None] | None) -> list[dict]:
    """Each layer's `LAYER_FIELDS`."""
    overrides = _overrides(hf, types)
    rope = {kind: _rope(hf, kind) for kind in dict.fromkeys(types)}
    wide = 2 if hf.get("use_double_wide_mlp") else 1
    fields = []
    for i, kind in enumerate(types):
        own = {OVERRIDES[key]: value for key, value in overrides.get(i, {}).items()}
        reads = sources is not None and sources[i] is not None
        fields.append(
            {
                "sliding_window": hf.get("sliding_window", 512) if kind == LOCAL else None,
                "position_params": rope[kind],
                "d_head": own.get("d_head", hf.get("head_dim", 256)),
                "n_kv_heads": own.get("n_kv_heads", hf.get("num_key_value_heads", 4)),
                "d_ff": hf["intermediate_size"] * (wide if reads else 1),
                "values_from_keys": bool(hf.get("attention_k_eq_v")) and kind == GLOBAL,
            }
        )
    return fields


def _labels(types: list[str], fields: list[dict], sources: list[int | None] | None) -> tuple[dict, list, dict]:
    """(the config's own fields, those of the first global layer; each layer's label; each label's settings):
    a layer with other fields is labelled by its type, "_kv_shared" when it reads another's keys, and a number
    when that label is taken by other settings."""
    own = fields[types.index(GLOBAL)]
    labels, settings = [], {}
    for i, (kind, layer) in enumerate(zip(types, fields)):
        if layer == own:
            labels.append(GLOBAL)
            continue
        changed = {key: value for key, value in layer.items() if value != own[key]}
        name = kind + ("_kv_shared" if sources is not None and sources[i] is not None else "")
        candidates = (name if k == 1 else f"{name}_{k}" for k in range(1, len(types) + 2))
        label = next(c for c in candidates if c != GLOBAL and settings.get(c, changed) == changed)
        settings[label] = changed
        labels.append(label)
    return own, labels, settings


def config_from_hf(hf: dict) -> Config:
    _refuse(hf)
    types = _layer_types(hf)
    sources = _kv_sources(hf, types)
    own, labels, settings = _labels(types, _layer_fields(hf, types, sources), sources)
    per_layer = hf.get("hidden_size_per_layer_input", 256)
    bias = bool(hf.get("attention_bias", False))
    fields = {**llama_like_from_hf(hf, HEADS), **own}
    return Config(
        **fields,
        layer_types=labels if settings else None,
        layer_settings=settings,
        kv_sources=sources,
        max_positions=hf.get("max_position_embeddings", 131072),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_placement="sandwich",
        activation=ACTIVATIONS[hf.get("hidden_activation", "gelu_pytorch_tanh")],
        qkv_bias=bias,
        attn_out_bias=bias,
        ffn_bias=False,
        attn_scale=1.0,
        qk_norm=True,
        value_norm=True,
        scale_embeddings=True,
        layer_scalars=True,
        per_layer_inputs={"dim": per_layer, "vocab_size": hf.get("vocab_size_per_layer_input", 262144)}
        if per_layer
        else None,
        logit_softcap=hf.get("final_logit_softcapping"),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        pad_token_id=hf.get("pad_token_id", 0),
        bos_token_id=hf.get("bos_token_id", 2),
        eos_token_id=first_token_id(hf.get("eos_token_id", 1)),
        hf_model_type=MODEL_TYPE,
    )


def _rope_entry(params: dict, layer_type: str, max_positions: int) -> dict:
    """One layer type's `rope_parameters` entry: "default", or "proportional" for p-RoPE (`frequency_fraction`)
    or a linear scaling; what reads back as other parameters is refused."""
    scaling = params.get("scaling")
    fraction = params.get("frequency_fraction", 1.0)
    entry: dict = {"rope_type": "default", "rope_theta": float(params["theta"])}
    if fraction != 1.0 or scaling is not None:
        entry = {"rope_type": "proportional", "rope_theta": entry["rope_theta"], "partial_rotary_factor": fraction}
        if scaling is not None:
            entry["factor"] = scaling.get("factor")
    back = {"model_type": MODEL_TYPE, "max_position_embeddings": max_positions, "rope_parameters": {layer_type: entry}}
    if positions.get("rope").resolve_params(rope_params(back, layer_type=layer_type)) != params:
        raise unsupported(MODEL_TYPE, f"RoPE other than default or proportional ({dict(params)}) (to_hf)")
    return entry


def _check_layout(cfg: Config) -> None:
    if (
        cfg.arch != "decoder"
        or cfg.norm != "rmsnorm"
        or cfg.norm_placement != "sandwich"
        or not cfg.qk_norm
        or cfg.qk_norm_over != "head"
        or not cfg.value_norm
        or not cfg.scale_embeddings
        or not cfg.layer_scalars
        or cfg.attn_scale != 1.0
        or cfg.activation not in ACTIVATIONS.values()
        or any(layer.position != "rope" for layer in cfg.layer_configs(cfg.n_layers))
    ):
        raise unsupported(
            MODEL_TYPE,
            "a layout other than a RoPE decoder with RMSNorm (sandwich, QK-norm, value norm), GeGLU, scaled "
            "embeddings, layer scalars and attention scale 1 (to_hf)",
        )
    if cfg.qkv_bias != cfg.attn_out_bias or cfg.ffn_bias:
        raise unsupported(MODEL_TYPE, "attention biases on some projections only, or FFN biases (to_hf)")
    require_decoder_layout(cfg, MODEL_TYPE, norm_placement="sandwich", scale_embeddings=True)


def _one(values: list, what: str) -> object:
    """The one value `values` hold (refused by name when they differ)."""
    if len(set(map(repr, values))) > 1:
        raise unsupported(MODEL_TYPE, f"{what} that differ between layers (to_hf)")
    return values[0]


def _shared_to_hf(types: list[str], sources: list[int | None], layers: list[Config]) -> dict:
    """`num_kv_shared_layers`, `use_double_wide_mlp` and `intermediate_size`: the readers are the last layers,
    each reading the last earlier layer of its type; the other layers' FFN one width, the readers' that or twice."""
    n = len(types)
    first = n - sum(source is not None for source in sources)
    refused = unsupported(MODEL_TYPE, "KV sharing other than the last layers reading their type's last one (to_hf)")
    if any(types[i] not in types[:first] for i in range(first, n)):
        raise refused
    expected = [None] * first + [max(j for j in range(first) if types[j] == types[i]) for i in range(first, n)]
    if sources != expected:
        raise refused
    width = _one([layer.ff_dim for layer in layers[:first]], "FFN widths")
    wide = _one([layer.ff_dim / width for layer in layers[first:]] or [1.0], "FFN widths of KV-shared layers")
    if wide not in (1.0, 2.0):
        raise unsupported(MODEL_TYPE, f"KV-shared layers {wide} times as wide as the others (1 or 2) (to_hf)")
    return {"num_kv_shared_layers": n - first, "use_double_wide_mlp": wide == 2.0, "intermediate_size": width}


def _heads_to_hf(layers: list[Config], types: list[str]) -> dict:
    """`head_dim` and `num_key_value_heads` (those of the first local layer, else of the first), and each other
    layer's own in `per_layer_config`."""
    first = layers[types.index(LOCAL) if LOCAL in types else 0]
    top = {"head_dim": first.head_dim, "num_key_value_heads": first.kv_heads}
    overrides = {}
    for i, layer in enumerate(layers):
        own = {"head_dim": layer.head_dim, "num_key_value_heads": layer.kv_heads}
        differs = {key: value for key, value in own.items() if value != top[key]}
        if differs:
            overrides[str(i)] = differs
    return {**top, "per_layer_config": overrides}


def config_to_hf(cfg: Config) -> dict:
    _check_layout(cfg)
    layers = cfg.layer_configs(cfg.n_layers)
    types = [LOCAL if layer.sliding_window is not None else GLOBAL for layer in layers]
    if types[-1] != GLOBAL:
        raise unsupported(MODEL_TYPE, "a last layer with a sliding window (transformers makes it global) (to_hf)")
    sources = cfg.kv_sources or [None] * cfg.n_layers
    makers = [(kind, layer) for kind, layer, source in zip(types, layers, sources) if source is None]
    by_type = {kind: [layer for k, layer in zip(types, layers) if k == kind] for kind in dict.fromkeys(types)}
    values_from_keys = {
        kind: _one([c.values_from_keys for k, c in makers if k == kind], "values_from_keys") for kind in by_type
    }
    if values_from_keys.get(LOCAL):
        raise unsupported(MODEL_TYPE, "values from the keys on local layers (global ones only) (to_hf)")
    window = _one([layer.sliding_window for layer in by_type.get(LOCAL, layers[:1])], "sliding windows")
    rope = {
        kind: _rope_entry(_one([layer.position_params for layer in group], f"{kind} RoPE"), kind, cfg.max_positions)
        for kind, group in by_type.items()
    }
    per_layer = cfg.per_layer_inputs or {"dim": 0, "vocab_size": cfg.vocab_size}
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Gemma4", model="Gemma4TextModel"),
        **_heads_to_hf(layers, types),
        **_shared_to_hf(types, sources, layers),
        "hidden_activation": {ours: theirs for theirs, ours in ACTIVATIONS.items()}[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        "attention_bias": cfg.qkv_bias,
        "max_position_embeddings": cfg.max_positions,
        "layer_types": types,
        "sliding_window": window or 512,
        "rope_parameters": rope,
        "attention_k_eq_v": bool(values_from_keys.get(GLOBAL)),
        "hidden_size_per_layer_input": per_layer["dim"],
        "vocab_size_per_layer_input": per_layer["vocab_size"],
        "final_logit_softcapping": cfg.logit_softcap,
        "enable_moe_block": False,
        "use_bidirectional_attention": None,
    }


def _attention(layer: Config, ours: str, theirs: str, reads: bool) -> list[Rule]:
    """One layer's attention: q (and, unless it reads another layer's, k and v unless they come from the keys)
    fused into `qkv`, the QK-norms and the output projection."""
    attn = f"{theirs}.self_attn"
    names, sizes = [f"{attn}.q_proj"], [layer.n_heads * layer.head_dim]
    if not reads:
        names.append(f"{attn}.k_proj")
        names += [] if layer.values_from_keys else [f"{attn}.v_proj"]
        sizes += [layer.kv_heads * layer.head_dim] * (len(names) - 1)
    out = fused_linear(f"{ours}.attn.qkv", names, sizes, layer.qkv_bias)
    out += norm(f"{ours}.attn.q_norm", f"{attn}.q_norm", bias=False)
    out += [] if reads else norm(f"{ours}.attn.k_norm", f"{attn}.k_norm", bias=False)
    return out + linear(f"{ours}.attn.out", f"{attn}.o_proj", layer.attn_out_bias)


def _per_layer_inputs(ours: str, theirs: str) -> list[Rule]:
    return [
        *linear(f"{ours}.per_layer_input.gate", f"{theirs}.per_layer_input_gate", bias=False),
        *linear(f"{ours}.per_layer_input.projection", f"{theirs}.per_layer_projection", bias=False),
        *norm(f"{ours}.per_layer_input.norm", f"{theirs}.post_per_layer_input_norm", bias=False),
    ]


def rules(cfg: Config) -> list[Rule]:
    base = "model." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}embed_tokens.weight")]
    if cfg.per_layer_inputs is not None:
        out += [
            same("decoder.per_layer_inputs.embed.weight", f"{base}embed_tokens_per_layer.weight"),
            same("decoder.per_layer_inputs.projection.weight", f"{base}per_layer_model_projection.weight"),
            *norm("decoder.per_layer_inputs.norm", f"{base}per_layer_projection_norm", bias=False),
        ]
    sources = cfg.kv_sources or [None] * cfg.n_layers
    for i, (layer, source) in enumerate(zip(cfg.layer_configs(cfg.n_layers), sources)):
        ours, theirs = f"decoder.layers.{i}", f"{base}layers.{i}"
        out += _sandwich_norms(ours, theirs) + _attention(layer, ours, theirs, source is not None)
        mlp, width = f"{theirs}.mlp", layer.ff_dim
        out += fused_linear(f"{ours}.ffn.up", (f"{mlp}.gate_proj", f"{mlp}.up_proj"), (width, width), bias=False)
        out += linear(f"{ours}.ffn.down", f"{mlp}.down_proj", bias=False)
        out.append(same(f"{ours}.layer_scalar", f"{theirs}.layer_scalar"))
        out += _per_layer_inputs(ours, theirs) if cfg.per_layer_inputs is not None else []
    out += norm("decoder.norm", f"{base}norm", bias=False)
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out.append(same("head.proj.weight", "lm_head.weight"))
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """A stored copy of a tied head, and the key/value tensors a checkpoint may keep for the KV-shared layers
    (transformers drops them too)."""
    patterns = [r"lm_head\.weight"] if cfg.tie_embeddings else []
    for i, source in enumerate(cfg.kv_sources or []):
        if source is not None:
            patterns.append(rf"(model\.)?layers\.{i}\.self_attn\.(k_proj|v_proj|k_norm|v_norm)\..*")
    return tuple(patterns)


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, writes=WRITES + WRITES_PER_LAYER))
