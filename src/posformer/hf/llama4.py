"""Llama 4's text model (model_type "llama4_text"): iRoPE layers with dense or mixture-of-experts feed-forwards.

Pre-RMSNorm, GQA without biases, RoPE on pairs (2i, 2i + 1) (layout "interleaved": transformers rotates complex
numbers), `rope_theta` 500000 and an optional "llama3" scaling. `no_rope_layers` (1 = RoPE, 0 = NoPE; every
`no_rope_layer_interval`-th layer NoPE by default) and `layer_types` ("chunked_attention" layers attend within
chunks of `attention_chunk_size`) become `Config.layer_types`: the RoPE layers with `use_qk_norm` normalise q and
k by a weightless L2 norm of eps `rms_norm_eps` (`Config.qk_norm_kind="l2"`; transformers applies it after the
rotation, which keeps its result), and with `attn_temperature_tuning` the NoPE layers scale their queries by the
log-n temperature of `attn_scale` and `floor_scale` (`Config.query_temperature`; transformers reads the cache slot
where posformer reads the position id: the same for the default ids, counted over the slots). The layers
`moe_layers` names (by default every `interleave_moe_layer_step`-th) are mixtures of experts (`Config.moe_layers`):
a router whose top-k logits pass through a sigmoid that scales each chosen expert's input
(`Config.router_softmax="sigmoid_input"`),
`num_local_experts` SwiGLU experts of `intermediate_size` units stored fused (`experts.gate_up_proj` (E, hidden, 2
F), gate columns first, and `experts.down_proj` (E, F, hidden), the transposes of posformer's `experts.up` /
`experts.down`), and a shared expert of the same size added for every token (`Config.shared_expert_d_ff`); the
other layers a dense SwiGLU of `intermediate_size_mlp` units. transformers adds no load-balancing loss to
Llama4ForCausalLM's, so `router_aux_loss_coef` is read as 0. `router_jitter_noise`, `attention_bias`, a rope
scaling other than "llama3" and layer types other than full and chunked attention are refused by name.
Heads: Llama4ForCausalLM (causal_lm), Llama4TextModel (none).
"""

from __future__ import annotations

from posformer.config import Config
from posformer.hf.decoder_fields import gated_decoder_fields
from posformer.hf.family import Family, register, unsupported
from posformer.hf.layout import require_decoder_layout, require_default_scale, require_fields
from posformer.hf.llama import HIDDEN_ACT, ignore, llama_like_to_hf
from posformer.hf.mapping import Rule, fused_linear, linear, same
from posformer.hf.mixtral import dense_ffn_rules, moe_decoder_rules, transposed_experts
from posformer.hf.rope import rope_params, rope_to_hf, scaling_dict

MODEL_TYPE = "llama4_text"
LAYER_TYPES = ("full_attention", "chunked_attention")
DEFAULT_CHUNK = 8192  # `attention_chunk_size` written when no layer chunks (transformers 4.57.6 needs one)


def _check_features(hf: dict) -> None:
    for key in ("router_jitter_noise", "attention_bias"):
        if hf.get(key):
            raise unsupported(MODEL_TYPE, f"{key}={hf[key]!r}")
    scaling, _, _ = scaling_dict(hf)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if scaling and kind not in ("default", "llama3"):
        raise unsupported(MODEL_TYPE, f"rope scaling {kind!r} (Llama 4 scales RoPE the llama3 way only)")


def _layer_kinds(hf: dict) -> list[tuple[bool, int | None]]:
    """Each layer's (rotates, chunk or None), as transformers builds them from `no_rope_layers` and `layer_types`."""
    n, chunk = hf["num_hidden_layers"], hf.get("attention_chunk_size", DEFAULT_CHUNK)
    interval = hf.get("no_rope_layer_interval", 4)
    rotates = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    types = hf.get("layer_types") or [
        "chunked_attention" if r and chunk is not None else "full_attention" for r in rotates[:n]
    ]
    if len(rotates) < n or len(types) != n or set(types) - set(LAYER_TYPES):
        raise unsupported(
            MODEL_TYPE,
            f"no_rope_layers={rotates} / layer_types={types} for num_hidden_layers={n} "
            f"(types: {', '.join(LAYER_TYPES)})",
        )
    if "chunked_attention" in types and chunk is None:
        raise unsupported(MODEL_TYPE, "chunked_attention layers with attention_chunk_size=None")
    return [(bool(r), chunk if kind == "chunked_attention" else None) for r, kind in zip(rotates, types)]


def _layers(hf: dict) -> dict:
    """`layer_types` and `layer_settings`: each layer's label says whether it rotates and whether it chunks."""
    temperature = None
    if hf.get("attn_temperature_tuning", True) and hf.get("attn_scale", 0.1):
        temperature = {"scale": float(hf.get("attn_scale", 0.1)), "floor_size": hf.get("floor_scale", 8192)}
    l2 = {"qk_norm": True, "qk_norm_kind": "l2"} if hf.get("use_qk_norm", True) else {}
    labels, settings = [], {}
    for rotates, chunk in _layer_kinds(hf):
        own = {"attention_chunk": chunk} if chunk else {}
        if rotates:
            own.update(l2)
        else:
            own.update(position="none", **({"query_temperature": temperature} if temperature else {}))
        label = f"{'chunked' if chunk else 'full'}_{'rope' if rotates else 'nope'}" if own else "full_attention"
        labels.append(label)
        settings[label] = own
    if set(labels) == {"full_attention"}:
        return {}
    return {"layer_types": labels, "layer_settings": {label: s for label, s in settings.items() if s}}


def _experts(hf: dict) -> dict:
    """The mixture-of-experts fields: none when `moe_layers` (or the interleave step) leaves every layer dense."""
    n, step = hf["num_hidden_layers"], hf.get("interleave_moe_layer_step", 1)
    indices = hf.get("moe_layers")
    indices = list(range(step - 1, n, step)) if indices is None else indices
    if not all(isinstance(i, int) and 0 <= i < n for i in indices):
        raise unsupported(MODEL_TYPE, f"moe_layers={indices} (layer indices below num_hidden_layers={n})")
    if not indices:
        return {}
    layers = [i in indices for i in range(n)]
    return dict(
        n_experts=hf.get("num_local_experts", 16),
        experts_per_token=hf.get("num_experts_per_tok", 1),
        expert_d_ff=hf["intermediate_size"],
        shared_expert_d_ff=hf["intermediate_size"],
        router_softmax="sigmoid_input",
        moe_layers=None if all(layers) else layers,
    )


def config_from_hf(hf: dict) -> Config:
    fields = gated_decoder_fields(hf, MODEL_TYPE, norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    _check_features(hf)
    return Config(
        **{**fields, "d_head": hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]},
        d_ff=hf.get("intermediate_size_mlp", 16384),
        **_experts(hf),
        position="rope",
        position_params={**rope_params(hf, default_theta=500000.0), "layout": "interleaved"},
        max_positions=hf.get("max_position_embeddings", 4096 * 32),
        **_layers(hf),
        qkv_bias=False,
        attn_out_bias=False,
    )


def _layers_to_hf(cfg: Config) -> dict:
    """`no_rope_layers`, `layer_types`, `attention_chunk_size`, `use_qk_norm` and the temperature of the NoPE layers,
    from `cfg`'s layer configs; what Llama 4 cannot express (another encoding or RoPE setting on some layers, a
    window, chunks of two sizes, a QK-norm other than the L2 one on every RoPE layer, a temperature other than one
    on every NoPE layer) is refused by name."""
    layers = cfg.layer_configs(cfg.n_layers)
    rotates = [c.position == "rope" for c in layers]
    if any(
        c.position not in ("rope", "none") or (r and c.position_params != cfg.position_params)
        for c, r in zip(layers, rotates)
    ):
        raise unsupported(MODEL_TYPE, "per-layer position settings other than NoPE layers (to_hf)")
    if any(c.sliding_window is not None for c in layers):
        raise unsupported(MODEL_TYPE, "a sliding_window (Llama 4 chunks its attention instead) (to_hf)")
    chunks = {c.attention_chunk for c in layers} - {None}
    norms = {(c.qk_norm, c.qk_norm_kind, c.qk_norm_over) for c, r in zip(layers, rotates) if r}
    l2 = (True, "l2", "head")
    if (
        len(chunks) > 1
        or norms not in (set(), {l2}, {(False, "norm", "head")})
        or any(c.qk_norm for c, r in zip(layers, rotates) if not r)
    ):
        raise unsupported(
            MODEL_TYPE,
            f"attention chunks of sizes {sorted(chunks)}, or QK-norms {sorted(norms)} on the RoPE layers and one on a "
            "NoPE layer (Llama 4: one chunk size; the weightless L2 QK-norm per head on every RoPE layer or none, "
            "none on NoPE layers) (to_hf)",
        )
    temperatures = [c.query_temperature for c, r in zip(layers, rotates) if not r]
    if any(c.query_temperature for c, r in zip(layers, rotates) if r) or any(
        t != temperatures[0] for t in temperatures
    ):
        raise unsupported(MODEL_TYPE, "a query temperature on RoPE layers, or two on NoPE layers (to_hf)")
    temperature = temperatures[0] if temperatures else None
    return {
        "no_rope_layers": [int(r) for r in rotates],
        "layer_types": ["chunked_attention" if c.attention_chunk else "full_attention" for c in layers],
        "attention_chunk_size": chunks.pop() if chunks else DEFAULT_CHUNK,
        "use_qk_norm": norms == {l2},
        "attn_temperature_tuning": temperature is not None,
        **({"attn_scale": temperature["scale"], "floor_scale": temperature["floor_size"]} if temperature else {}),
    }


def _experts_to_hf(cfg: Config) -> dict:
    """The feed-forward sizes, and the experts' fields of a model with mixture-of-experts layers (Llama 4's router,
    a shared expert of the experts' size, no biases)."""
    if cfg.n_experts is None:
        return {"intermediate_size": cfg.ff_dim, "intermediate_size_mlp": cfg.ff_dim, "moe_layers": []}
    require_fields(
        cfg,
        MODEL_TYPE,
        router_softmax="sigmoid_input",
        router_bias=False,
        expert_activation=None,
        sigmoid_router=None,
        shared_expert_d_ff=cfg.expert_ff_dim,
    )
    layers = cfg.moe_layers or [True] * cfg.n_layers
    return {
        "intermediate_size": cfg.expert_ff_dim,
        "intermediate_size_mlp": cfg.ff_dim,
        "num_local_experts": cfg.n_experts,
        "num_experts_per_tok": cfg.experts_per_token,
        "moe_layers": [i for i, experts in enumerate(layers) if experts],
    }


def config_to_hf(cfg: Config) -> dict:
    require_decoder_layout(cfg, MODEL_TYPE, qkv_bias=False, attn_out_bias=False, ffn_bias=False)
    if cfg.activation not in HIDDEN_ACT or cfg.position_params.get("layout") != "interleaved":
        raise unsupported(MODEL_TYPE, "a feed-forward other than a gated one, or RoPE's half layout (to_hf)")
    require_default_scale(cfg, MODEL_TYPE)
    rope = rope_to_hf(cfg)
    if rope["rope_scaling"] is not None and rope["rope_scaling"]["rope_type"] != "llama3":
        raise unsupported(MODEL_TYPE, f"rope scaling {rope['rope_scaling']['rope_type']!r} (llama3 only) (to_hf)")
    return {
        **llama_like_to_hf(cfg, MODEL_TYPE, "Llama4", model="Llama4TextModel"),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        **rope,
        **_layers_to_hf(cfg),
        **_experts_to_hf(cfg),
    }


def rules(cfg: Config) -> list[Rule]:
    """q/k/v fused (the L2 QK-norm has no weights); a dense layer's `feed_forward` gate/up fused into `ffn.up`; an
    expert layer's `feed_forward.router`, its fused experts transposed, and its shared expert."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim

    def attention(ours: str, theirs: str) -> list[Rule]:
        attn = f"{theirs}.self_attn"
        qkv = fused_linear(
            f"{ours}.attn.qkv", (f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"), (q, kv, kv), False
        )
        return qkv + linear(f"{ours}.attn.out", f"{attn}.o_proj", bias=False)

    def ffn(ours: str, theirs: str, layer: int) -> list[Rule]:
        hf = f"{theirs}.feed_forward"
        if not cfg.uses_experts(layer):
            return dense_ffn_rules(f"{ours}.ffn", hf, cfg.ff_dim)
        return [
            same(f"{ours}.ffn.router.weight", f"{hf}.router.weight"),
            transposed_experts(f"{ours}.ffn.experts.up", f"{hf}.experts.gate_up_proj"),
            transposed_experts(f"{ours}.ffn.experts.down", f"{hf}.experts.down_proj"),
            *dense_ffn_rules(f"{ours}.ffn.shared_expert", f"{hf}.shared_expert", cfg.shared_expert_d_ff),
        ]

    return moe_decoder_rules(cfg, attention, ffn)


FAMILY = register(
    Family(
        (MODEL_TYPE,),
        config_from_hf,
        config_to_hf,
        rules,
        ignore,
        experts=True,
        writes=("attention_chunk", "qk_norm_kind", "qk_norm", "query_temperature"),
    )
)
