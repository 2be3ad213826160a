"""LLaMA and the families that share its layout: Mistral, Qwen2, Qwen3 and SmolLM3.

Pre-RMSNorm, RoPE (half layout), SwiGLU, GQA. Qwen2 adds q/k/v biases; Qwen3 normalises each head's query and
key (QK-norm, `q_norm` / `k_norm`) before RoPE. Mistral slides a window over every layer, Qwen2 and Qwen3 over
some, and SmolLM3 leaves RoPE out of some layers (NoPE): per-layer kinds become `Config.layer_types`.
Heads: *ForCausalLM (causal_lm) and *Model (none).
"""

from __future__ import annotations

from typing import Callable

from posformer.config import Config
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.layout import require_decoder_layout, require_default_scale
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.hf.rope import rope_params, rope_to_hf

HEADS = {"ForCausalLM": "causal_lm", "Model": "none"}
GATED = {"silu": "swiglu", "gelu": "geglu", "relu": "reglu"}
HIDDEN_ACT = {ours: theirs for theirs, ours in GATED.items()}
# the config classes that leave tie_word_embeddings at PretrainedConfig's default, True: a config.json that
# omits it (save_pretrained writes only values that differ from the defaults) means tied
TIED_BY_DEFAULT = ("smollm3",)
ARCH_NAMES = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "smollm3": "SmolLM3"}


def _layer_kinds(hf: dict) -> list[tuple[bool, int | None]]:
    """Each layer's (rotates, sliding window or None), as transformers 4.57.6 builds them from the config.

    Mistral slides every layer. Qwen2 and Qwen3 slide the layers `layer_types` marks, by default those from
    `max_window_layers` on, when `use_sliding_window`. SmolLM3 rotates the layers where `no_rope_layers` is 1
    (every `no_rope_layer_interval`-th layer is NoPE by default) and slides the ones `layer_types` marks.
    """
    n, model_type, window = hf["num_hidden_layers"], hf["model_type"], hf.get("sliding_window")
    rotates = [1] * n
    if model_type == "llama":
        return [(True, None)] * n
    if model_type == "mistral":
        return [(True, window)] * n
    if model_type == "smollm3":
        interval = hf.get("no_rope_layer_interval", 4)
        rotates = hf.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        default = [
            "sliding_attention" if hf.get("use_sliding_window") and window is not None and not r else "full_attention"
            for r in rotates
        ]
    else:
        window = window if hf.get("use_sliding_window") else None
        first = hf.get("max_window_layers", 28)
        default = ["sliding_attention" if window is not None and i >= first else "full_attention" for i in range(n)]
    types = hf.get("layer_types") or default
    if len(types) != n or len(rotates) != n:
        raise unsupported(
            model_type,
            f"layer_types / no_rope_layers of {len(types)} / {len(rotates)} entries for num_hidden_layers={n}",
        )
    return [(bool(r), window if kind == "sliding_attention" else None) for r, kind in zip(rotates, types)]


def _layers(hf: dict) -> dict:
    """The Config fields of the layer kinds: one sliding_window for all, or layer_types and their settings."""
    kinds = _layer_kinds(hf)
    if len(set(kinds)) == 1 and kinds[0][0]:
        return {"sliding_window": kinds[0][1]}
    labels = [
        ("sliding_attention" if window else "full_attention") + ("" if rotates else "_nope")
        for rotates, window in kinds
    ]
    settings = {
        label: {**({"sliding_window": window} if window else {}), **({} if rotates else {"position": "none"})}
        for label, (rotates, window) in zip(labels, kinds)
    }
    return {"layer_types": labels, "layer_settings": {label: s for label, s in settings.items() if s}}


def _layers_to_hf(cfg: Config) -> dict:
    """The HF fields of `cfg`'s layer kinds (RoPE or NoPE layers, one sliding window or none), per family."""
    model_type, layers = cfg.hf_model_type, cfg.layer_configs(cfg.n_layers)
    if any(
        c.position not in ("rope", "none") or (c.position == "rope" and c.position_params != cfg.position_params)
        for c in layers
    ):
        raise unsupported(model_type, "per-layer position settings other than NoPE layers (to_hf)")
    rotates = [int(c.position == "rope") for c in layers]
    windows = [c.sliding_window for c in layers]
    sizes = set(windows) - {None}
    if len(sizes) > 1 or (0 in rotates and model_type != "smollm3"):
        raise unsupported(
            model_type, f"sliding windows of {len(sizes)} sizes, or NoPE layers (only smollm3 has them) (to_hf)"
        )
    window = sizes.pop() if sizes else None
    types = ["sliding_attention" if w else "full_attention" for w in windows]
    if model_type == "llama" and window is not None:
        raise unsupported(model_type, f"sliding_window={window} (llama has none) (to_hf)")
    if model_type == "mistral":
        if None in windows and window is not None:
            raise unsupported(model_type, "sliding-window attention on some layers only (mistral slides all) (to_hf)")
        return {"sliding_window": window}
    if model_type == "llama":
        return {}
    out = {"use_sliding_window": window is not None, "sliding_window": window, "layer_types": types}
    if model_type == "smollm3":
        return {**out, "no_rope_layers": rotates}
    return {**out, "max_window_layers": types.index("sliding_attention") if window else cfg.n_layers}


def _check_features(hf: dict) -> None:
    model_type = hf["model_type"]
    if hf.get("pretraining_tp", 1) not in (1, None):
        raise unsupported(model_type, f"tensor-parallel slicing pretraining_tp={hf['pretraining_tp']}")
    if hf.get("hidden_act", "silu") not in GATED:
        raise unsupported(model_type, f"hidden_act={hf['hidden_act']!r} (supported: {', '.join(GATED)})")


def llama_like_from_hf(hf: dict, heads: dict[str, str] = HEADS) -> dict:
    """The `Config` fields every llama-like family reads alike from its config.json (LLaMA's, Phi-3, Gemma 3,
    Cohere2, EXAONE 4, OLMo 3): a RoPE decoder's sizes, attention dropout, the head (by the architecture's suffix in
    `heads`) and the initializer range. Each family adds its own fields (norms, biases, token ids, defaults)."""
    return dict(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        n_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        position="rope",
        attention_dropout=hf.get("attention_dropout", 0.0),
        head=architecture(hf, heads, "causal_lm"),
        init_std=hf.get("initializer_range", 0.02),
    )


def config_from_hf(hf: dict) -> Config:
    _check_features(hf)
    model_type = hf["model_type"]
    qkv_bias = hf.get("attention_bias", model_type == "qwen2")
    return Config(
        **llama_like_from_hf(hf),
        d_head=hf.get("head_dim"),
        position_params=rope_params(hf),
        max_positions=hf.get("max_position_embeddings", 2048),
        norm="rmsnorm",
        norm_eps=hf.get("rms_norm_eps", 1e-6),
        norm_placement="pre",
        activation=GATED[hf.get("hidden_act", "silu")],
        qkv_bias=bool(qkv_bias),
        qk_norm=model_type == "qwen3",
        **_layers(hf),
        attn_out_bias=bool(hf.get("attention_bias", False)),
        ffn_bias=bool(hf.get("mlp_bias", False)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", model_type in TIED_BY_DEFAULT)),
        pad_token_id=hf.get("pad_token_id"),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=first_token_id(hf.get("eos_token_id")),
        hf_model_type=model_type,
    )


def first_token_id(token_id):
    """HF allows a list of eos ids; posformer keeps one (the first)."""
    return token_id[0] if isinstance(token_id, list) and token_id else token_id


def llama_like_to_hf(cfg: Config, model_type: str, name: str, model: str | None = None) -> dict:
    """The config.json fields every llama-like family writes alike (LLaMA's, Mixtral, Qwen3-MoE, Phi-3, Gemma 3,
    Cohere2, EXAONE 4, OLMo 3, DeepSeek-V3, gpt-oss): the architecture (NAME + "ForCausalLM", else `model`, by
    default NAME + "Model"), the sizes, attention dropout, tying, init and the special token ids. Each family adds
    its own (head_dim, the activation, the norm's eps, RoPE's, its layers') and may replace one (Mixtral's
    intermediate_size)."""
    return {
        "model_type": model_type,
        "architectures": [f"{name}ForCausalLM" if cfg.head_kind == "causal_lm" else model or f"{name}Model"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ff_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "attention_dropout": cfg.attention_dropout,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
    }


def config_to_hf(cfg: Config) -> dict:
    model_type = cfg.hf_model_type
    if (
        cfg.position != "rope"
        or cfg.norm != "rmsnorm"
        or cfg.norm_placement != "pre"
        or cfg.activation not in HIDDEN_ACT
    ):
        raise unsupported(model_type, "a layout other than RoPE + pre-RMSNorm + gated FFN (to_hf)")
    no_biases = dict(qkv_bias=False, attn_out_bias=False, ffn_bias=False) if model_type == "mistral" else {}
    require_decoder_layout(cfg, model_type, **no_biases)  # Mistral's projections have no biases
    require_default_scale(cfg, model_type)
    if model_type == "qwen2" and not (cfg.qkv_bias and not cfg.attn_out_bias and not cfg.ffn_bias):
        raise unsupported(model_type, "biases other than q/k/v only (to_hf)")
    if model_type == "qwen3" and (cfg.qkv_bias != cfg.attn_out_bias or cfg.ffn_bias):
        raise unsupported(model_type, "attention biases on some projections only, or FFN biases (to_hf)")
    if cfg.qk_norm != (model_type == "qwen3"):
        raise unsupported(model_type, f"qk_norm={cfg.qk_norm} (only qwen3 normalises q and k) (to_hf)")
    if cfg.qk_norm_over != "head":
        raise unsupported(model_type, f"qk_norm_over={cfg.qk_norm_over!r} (qwen3 normalises each head) (to_hf)")
    out = {
        **llama_like_to_hf(cfg, model_type, ARCH_NAMES[model_type]),
        "head_dim": cfg.head_dim,
        "hidden_act": HIDDEN_ACT[cfg.activation],
        "rms_norm_eps": cfg.norm_eps,
        **rope_to_hf(cfg),
    }
    if model_type == "qwen3":
        out["attention_bias"] = cfg.qkv_bias
    elif model_type != "qwen2":
        out["attention_bias"] = cfg.qkv_bias
        out["mlp_bias"] = cfg.ffn_bias
        if model_type in ("llama", "smollm3") and cfg.qkv_bias != cfg.attn_out_bias:
            raise unsupported(model_type, "q/k/v biases without an output bias (use qwen2) (to_hf)")
    return {**out, **_layers_to_hf(cfg)}


def layer_norms(ours: str, theirs: str) -> list[Rule]:
    """A pre-norm LLaMA layer's two RMSNorms: before attention and before the FFN."""
    return [
        *norm(f"{ours}.attn_res.norm", f"{theirs}.input_layernorm", bias=False),
        *norm(f"{ours}.ffn_res.norm", f"{theirs}.post_attention_layernorm", bias=False),
    ]


def output_norms(ours: str, theirs: str) -> list[Rule]:
    """The two RMSNorms of a layer that normalises each sub-layer's output (`norm_placement="output"`: Olmo 3,
    EXAONE 4): after attention and after the FFN."""
    return [
        *norm(f"{ours}.attn_res.norm", f"{theirs}.post_attention_layernorm", bias=False),
        *norm(f"{ours}.ffn_res.norm", f"{theirs}.post_feedforward_layernorm", bias=False),
    ]


def decoder_rules(
    cfg: Config, projections: Callable[[str, str], list[Rule]], norms: Callable[[str, str], list[Rule]] = layer_norms
) -> list[Rule]:
    """The weight rules of a LLaMA-layout decoder; `projections(ours, theirs)` gives one layer's input
    projections (q/k/v with any QK-norm, and the gated FFN's gate/up), the part the families lay out apart, and
    `norms(ours, theirs)` its norms."""
    base = "model." if cfg.head_kind == "causal_lm" else ""
    out = [same("embed_tokens.weight", f"{base}embed_tokens.weight")]
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"{base}layers.{i}"
        out += norms(ours, theirs)
        out += projections(ours, theirs)
        out += linear(f"{ours}.attn.out", f"{theirs}.self_attn.o_proj", cfg.attn_out_bias)
        out += linear(f"{ours}.ffn.down", f"{theirs}.mlp.down_proj", cfg.ffn_bias)
    out += norm("decoder.norm", f"{base}norm", bias=False)
    if cfg.head_kind == "causal_lm" and not cfg.tie_embeddings:
        out.append(same("head.proj.weight", "lm_head.weight"))
    return out


def separate_projections(cfg: Config) -> Callable[[str, str], list[Rule]]:
    """One layer's q/k/v (with any QK-norm) and gate/up projections, each set fused into posformer's one."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim

    def projections(ours: str, theirs: str) -> list[Rule]:
        attn, mlp = f"{theirs}.self_attn", f"{theirs}.mlp"
        out = fused_linear(
            f"{ours}.attn.qkv", (f"{attn}.q_proj", f"{attn}.k_proj", f"{attn}.v_proj"), (q, kv, kv), cfg.qkv_bias
        )
        if cfg.qk_norm:
            out += norm(f"{ours}.attn.q_norm", f"{attn}.q_norm", bias=False)
            out += norm(f"{ours}.attn.k_norm", f"{attn}.k_norm", bias=False)
        return out + fused_linear(
            f"{ours}.ffn.up", (f"{mlp}.gate_proj", f"{mlp}.up_proj"), (cfg.ff_dim, cfg.ff_dim), cfg.ffn_bias
        )

    return projections


def rules(cfg: Config) -> list[Rule]:
    """Separate q/k/v and gate/up projections, each fused into posformer's one."""
    return decoder_rules(cfg, separate_projections(cfg))


def ignore(cfg: Config) -> tuple[str, ...]:
    """Rotary buffers of old checkpoints, and a stored copy of a tied head."""
    patterns = [r".*rotary_emb\.inv_freq"]
    if cfg.tie_embeddings:
        patterns.append(r"lm_head\.weight")
    return tuple(patterns)


FAMILY = register(Family(tuple(ARCH_NAMES), config_from_hf, config_to_hf, rules, ignore))
