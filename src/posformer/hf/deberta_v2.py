"""DeBERTa-v2 and DeBERTa-v3 (Hugging Face model_type "deberta-v2").

A post-LayerNorm encoder: word (+ token type) embeddings, LayerNorm, N blocks of
disentangled self-attention and a GELU feed-forward, each followed by
residual + LayerNorm, with no final norm. With `relative_attention=True` (every
published checkpoint) positions enter only through the attention: posformer's
`deberta` encoding (positions/deberta.py) holds the shared relative table
`encoder.rel_embeddings` (with its optional LayerNorm) and each layer's position
projections.

`DebertaV2Config`'s own defaults are `relative_attention=False`,
`position_biased_input=True`: a BERT-like encoder with a learned absolute table
`embeddings.position_embeddings` (posformer's `learned`; with
`position_biased_input=False` too, no positions: `none`). Hugging Face still
scales its attention by 1/sqrt(head_dim * (1 + the c2p/p2c entries of
`pos_att_type`)), which becomes `Config.attn_scale`. Relative attention and an
absolute table together are refused (posformer has one encoding per model).

Heads: DebertaV2Model (none), DebertaV2ForMaskedLM (masked_lm), DebertaV2ForQuestionAnswering (span_qa).

Layouts one Hugging Face config switch changes are brought to a single layout
(the one `rules` describes) by `prepare_state`:

- `share_att_key=True` (v3, v2-xlarge): each layer projects the relative table with
  its own query_proj/key_proj. posformer keeps a separate `pos_query_proj[l]` /
  `pos_key_proj[l]` per layer, loaded as copies of them.
- `legacy=False`: the MLM head lives under `lm_predictions.lm_head.*` and always
  decodes with the word embeddings; it is read as the legacy `cls.predictions.*`.
- a base model from a checkpoint stored with the `deberta.` prefix (Microsoft's
  original checkpoints carry no `architectures` and add `lm_predictions.*` and
  `mask_predictions.*` pretraining heads, which are dropped).

`to_hf` writes the legacy MLM layout (untied: `cls.predictions.decoder.weight` and `.bias`, the bias transformers
5 reads, `bert.lm_bias_state`), and `share_att_key=true`, each shared tensor once, when every layer's position
projections equal its query/key projections exactly (as after loading a v3 checkpoint); once they differ (after
training in posformer) `share_att_key=false` with `pos_key_proj`/`pos_query_proj`, the same outputs either way.

Hugging Face multiplies the embeddings by the padding mask and masks padded queries as well as keys; both only
change outputs at padded positions.

Limit: with max_relative_positions - 1 <= position_buckets / 2 (a degenerate
setting no published checkpoint uses, e.g. 256 buckets and 64 positions) Hugging
Face's log bucketing divides by the log of a number <= 1; posformer keeps the raw
distances there (positions/deberta.py), so the two agree on sequences of at most
position_buckets / 2 tokens only.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from posformer.config import Config
from posformer.hf.activations import activation_from_hf, activation_to_hf
from posformer.hf.bert import lm_bias_rule, lm_bias_state, plain_encoder_fields
from posformer.hf.family import Family, UnsupportedCheckpoint, architecture, register, unsupported
from posformer.hf.layout import require_fields, require_head
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same
from posformer.positions import DeBERTa

MODEL_TYPE = "deberta-v2"
HEADS = {"ForMaskedLM": "masked_lm", "ForQuestionAnswering": "span_qa", "Model": "none"}
ARCHITECTURES = {
    "masked_lm": "DebertaV2ForMaskedLM",
    "span_qa": "DebertaV2ForQuestionAnswering",
    "none": "DebertaV2Model",
}
BASE_PREFIX = "deberta."
# kind of position term -> (our per-layer projection, HF's separate projection, HF's shared projection)
POSITION_PROJECTIONS = {
    "c2p": ("pos_key_proj", "pos_key_proj", "key_proj"),
    "p2c": ("pos_query_proj", "pos_query_proj", "query_proj"),
}
# Hugging Face's non-legacy MLM head names -> the legacy names `rules` uses.
NON_LEGACY_HEAD = {
    "lm_predictions.lm_head.dense.": "cls.predictions.transform.dense.",
    "lm_predictions.lm_head.LayerNorm.": "cls.predictions.transform.LayerNorm.",
    "lm_predictions.lm_head.bias": "cls.predictions.bias",
}


def _listed_kinds(hf: dict) -> list[str]:
    """HF's `pos_att_type`, a list or the older "p2c|c2p" string, as a list (None: empty)."""
    kinds = hf.get("pos_att_type") or []
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.lower().split("|") if k.strip()]
    return list(kinds)


def _pos_att_type(hf: dict) -> list[str]:
    """The relative position terms of `pos_att_type`, checked."""
    kinds = _listed_kinds(hf)
    if not kinds:
        raise unsupported(MODEL_TYPE, "relative_attention with an empty pos_att_type (no position term)")
    other = [k for k in kinds if k not in DeBERTa.pos_att_types]
    if other or len(set(kinds)) != len(kinds):
        raise unsupported(MODEL_TYPE, f"pos_att_type={kinds!r} (supported: distinct values of {DeBERTa.pos_att_types})")
    return kinds


def _norm_rel_ebd(hf: dict) -> str:
    """HF's `norm_rel_ebd` ("none", "layer_norm", or "|"-separated) -> our "none" / "layer_norm"."""
    parts = {p.strip() for p in str(hf.get("norm_rel_ebd") or "none").lower().split("|")}
    choices = DeBERTa.norm_rel_ebd_choices
    if parts - set(choices):
        raise unsupported(MODEL_TYPE, f"norm_rel_ebd={hf['norm_rel_ebd']!r} (supported: {', '.join(choices)})")
    return "layer_norm" if "layer_norm" in parts else "none"


def _check_features(hf: dict, head: str) -> None:
    hidden, heads = hf["hidden_size"], hf["num_attention_heads"]
    if hf.get("relative_attention", False) and hf.get("position_biased_input", True):
        raise unsupported(
            MODEL_TYPE,
            "position_biased_input=True with relative_attention=True (learned absolute "
            "positions added to the embeddings on top of the relative attention)",
        )
    if (hf.get("conv_kernel_size") or 0) > 0:
        raise unsupported(
            MODEL_TYPE,
            f"conv_kernel_size={hf['conv_kernel_size']} (the convolution layer after "
            "the first layer of DeBERTa-v2 xlarge/xxlarge)",
        )
    if hf.get("embedding_size", hidden) != hidden:
        raise unsupported(
            MODEL_TYPE, f"embedding_size={hf['embedding_size']} != hidden_size={hidden} (the embed_proj projection)"
        )
    if hf.get("attention_head_size", hidden // heads) * heads != hidden:
        raise unsupported(
            MODEL_TYPE, f"attention_head_size={hf['attention_head_size']} with {heads} heads != hidden_size={hidden}"
        )
    if head == "masked_lm" and not hf.get("legacy", True) and hf.get("tie_word_embeddings", True):
        raise unsupported(
            MODEL_TYPE,
            "a non-legacy MLM head (legacy=False) with tie_word_embeddings=True "
            "(transformers then ties the head's dense layer to the word embeddings "
            "and cannot load it either; set tie_word_embeddings to false)",
        )
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    if head == "span_qa" and labels != 2:
        raise unsupported(MODEL_TYPE, f"a question-answering head with num_labels={labels} (start and end: 2)")


def _absolute_attn_scale(hf: dict) -> float | None:
    """Without relative attention HF still divides q.k by sqrt(head_dim * (1 + c2p/p2c entries)); None: 1."""
    factor = 1 + sum(kind in _listed_kinds(hf) for kind in DeBERTa.pos_att_types)
    head_dim = hf["hidden_size"] // hf["num_attention_heads"]
    return None if factor == 1 else (head_dim * factor) ** -0.5


def _positions(hf: dict) -> dict:
    """The `Config` fields of the position encoding: relative `deberta`, else `learned` or `none`."""
    if not hf.get("relative_attention", False):
        return {
            "position": "learned" if hf.get("position_biased_input", True) else "none",
            "attn_scale": _absolute_attn_scale(hf),
        }
    return {
        "position": "deberta",
        "position_params": {
            "position_buckets": hf.get("position_buckets", -1),
            "max_relative_positions": hf.get("max_relative_positions", -1),
            "norm_rel_ebd": _norm_rel_ebd(hf),
            "pos_att_type": _pos_att_type(hf),
        },
    }


def config_from_hf(hf: dict) -> Config:
    head = architecture(hf, HEADS, "none")
    _check_features(hf, head)
    legacy = hf.get("legacy", True)
    return Config(
        arch="encoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf["intermediate_size"],
        **_positions(hf),
        max_positions=hf.get("max_position_embeddings", 512),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_eps", 1e-7),
        norm_placement="post",
        final_norm=False,
        embed_norm=True,
        activation=activation_from_hf(MODEL_TYPE, hf.get("hidden_act", "gelu")),
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        type_vocab_size=hf.get("type_vocab_size", 0),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)) if legacy or head != "masked_lm" else True,
        head=head,
        pad_token_id=hf.get("pad_token_id", 0),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id"),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=MODEL_TYPE,
    )


def config_to_hf(cfg: Config) -> dict:
    require_head(cfg, MODEL_TYPE, tuple(ARCHITECTURES))
    require_fields(
        cfg,
        MODEL_TYPE,
        arch="encoder",
        norm="layernorm",
        norm_bias=True,
        norm_placement="post",
        use_final_norm=False,
        embed_norm=True,
        qkv_bias=True,
        attn_out_bias=True,
        ffn_bias=True,
        kv_heads=cfg.n_heads,
        scale_embeddings=False,
        parallel_residual=False,
        activation_dropout=0.0,
        **plain_encoder_fields(cfg),
    )
    if cfg.n_heads * cfg.head_dim != cfg.d_model:
        raise UnsupportedCheckpoint(
            f"to_hf: a {MODEL_TYPE} checkpoint needs n_heads * head_dim == d_model, got {cfg.n_heads} * {cfg.head_dim}"
        )
    out = {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.ff_dim,
        "hidden_act": activation_to_hf(MODEL_TYPE, cfg.activation),
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_positions,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.init_std,
        "layer_norm_eps": cfg.norm_eps,
        "legacy": True,
        "tie_word_embeddings": cfg.tie_embeddings,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
    }
    if cfg.position != "deberta":
        return {**out, **_absolute_positions_to_hf(cfg)}
    require_fields(cfg, MODEL_TYPE, attn_scale=None)
    p = cfg.position_params
    return {
        **out,
        "relative_attention": True,
        "position_biased_input": False,
        "share_att_key": False,
        "position_buckets": p["position_buckets"],
        "max_relative_positions": p["max_relative_positions"],
        "norm_rel_ebd": p["norm_rel_ebd"],
        "pos_att_type": list(p["pos_att_type"]),
    }


def _absolute_positions_to_hf(cfg: Config) -> dict:
    """`learned` or `none` positions: no relative attention, the attention scale told by `pos_att_type`'s length."""
    if cfg.position not in ("learned", "none"):
        raise UnsupportedCheckpoint(
            f"to_hf: a {MODEL_TYPE} checkpoint has 'deberta', 'learned' or 'none' "
            f"positions, got Config.position={cfg.position!r}"
        )
    if cfg.position == "learned" and cfg.position_params["offset"] != 0:
        raise UnsupportedCheckpoint(
            f"to_hf: {MODEL_TYPE} reads position p from row p; Config.position_params "
            f"has offset={cfg.position_params['offset']!r}"
        )
    for kinds in ([], ["c2p"], ["p2c", "c2p"]):
        if math.isclose(cfg.scale, (cfg.head_dim * (1 + len(kinds))) ** -0.5, rel_tol=1e-9):
            return {
                "relative_attention": False,
                "position_biased_input": cfg.position == "learned",
                "pos_att_type": kinds,
                "norm_rel_ebd": "none",
            }
    raise UnsupportedCheckpoint(
        f"to_hf: {MODEL_TYPE} scales attention by 1/sqrt(head_dim * k), k in 1, 2, 3; "
        f"Config.attn_scale={cfg.attn_scale!r} is none of them"
    )


def _prefix(cfg: Config) -> str:
    return "" if cfg.head_kind == "none" else BASE_PREFIX


def _kinds(cfg: Config) -> list[str]:
    """The relative position terms (none without relative attention)."""
    if cfg.position != "deberta":
        return []
    return list(cfg.position_params["pos_att_type"])


def rules(cfg: Config) -> list[Rule]:
    """The `share_att_key=False`, legacy-head layout (see `prepare_state` for the others)."""
    base, d = _prefix(cfg), cfg.d_model
    out = [same("embed_tokens.weight", f"{base}embeddings.word_embeddings.weight")]
    if cfg.type_vocab_size:
        out.append(same("token_types.weight", f"{base}embeddings.token_type_embeddings.weight"))
    out += norm("encoder.embed_norm", f"{base}embeddings.LayerNorm")
    if cfg.position == "learned":
        out.append(same("encoder.position.table.weight", f"{base}embeddings.position_embeddings.weight"))
    elif cfg.position == "deberta":
        out.append(same("encoder.position.rel_embeddings.weight", f"{base}encoder.rel_embeddings.weight"))
        if cfg.position_params["norm_rel_ebd"] == "layer_norm":
            out += norm("encoder.position.norm", f"{base}encoder.LayerNorm")
    for i in range(cfg.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{base}encoder.layer.{i}"
        attn = f"{theirs}.attention.self"
        out += fused_linear(
            f"{ours}.attn.qkv", (f"{attn}.query_proj", f"{attn}.key_proj", f"{attn}.value_proj"), (d, d, d), bias=True
        )
        for kind in _kinds(cfg):
            proj, separate, _ = POSITION_PROJECTIONS[kind]
            out += linear(f"encoder.position.{proj}.{i}", f"{attn}.{separate}")
        out += linear(f"{ours}.attn.out", f"{theirs}.attention.output.dense")
        out += norm(f"{ours}.attn_res.norm", f"{theirs}.attention.output.LayerNorm")
        out += linear(f"{ours}.ffn.up", f"{theirs}.intermediate.dense")
        out += linear(f"{ours}.ffn.down", f"{theirs}.output.dense")
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.output.LayerNorm")
    if cfg.head_kind == "masked_lm":
        out += linear("head.dense", "cls.predictions.transform.dense")
        out += norm("head.norm", "cls.predictions.transform.LayerNorm")
        out.append(lm_bias_rule(cfg, "cls.predictions.bias", "cls.predictions.decoder.bias"))
        if not cfg.tie_embeddings:
            out.append(same("head.proj.weight", "cls.predictions.decoder.weight"))
    elif cfg.head_kind == "span_qa":
        out += linear("head.proj", "qa_outputs")
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """Buffers and unused absolute-position tables; the decoder's stored copies; pretraining heads;
    without relative attention, the relative table's LayerNorm HF builds (norm_rel_ebd) but never applies."""
    patterns = [r"(deberta\.)?embeddings\.position_ids"]
    if cfg.position == "deberta":
        patterns.append(r"(deberta\.)?embeddings\.position_embeddings\.weight")
    else:
        patterns.append(r"(deberta\.)?encoder\.LayerNorm\.(weight|bias)")
    if cfg.head_kind == "masked_lm":
        patterns.append(r"mask_predictions\..*")
        if cfg.tie_embeddings:
            patterns.append(r"cls\.predictions\.decoder\.(weight|bias)")
    elif cfg.head_kind == "none":
        patterns.append(r"(lm_predictions|mask_predictions)\..*")
    return tuple(patterns)


def _shared_pairs(cfg: Config) -> list[tuple[str, str]]:
    """(separate position projection, the attention projection HF shares in its place) for every tensor."""
    base = _prefix(cfg)
    pairs = []
    for i in range(cfg.n_layers):
        attn = f"{base}encoder.layer.{i}.attention.self"
        for kind in _kinds(cfg):
            _, separate, shared = POSITION_PROJECTIONS[kind]
            pairs += [(f"{attn}.{separate}.{s}", f"{attn}.{shared}.{s}") for s in ("weight", "bias")]
    return pairs


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The checkpoint in the layout of `rules`: unprefixed base model, legacy head, separate projections."""
    state = dict(state)
    if (
        cfg.head_kind == "none"
        and f"{BASE_PREFIX}embeddings.word_embeddings.weight" in state
        and "embeddings.word_embeddings.weight" not in state
    ):
        state = {k.removeprefix(BASE_PREFIX): v for k, v in state.items()}
    if cfg.head_kind == "masked_lm" and not hf.get("legacy", True):
        for theirs, ours in NON_LEGACY_HEAD.items():
            for key in [k for k in state if k.startswith(theirs)]:
                state[ours + key.removeprefix(theirs)] = state.pop(key)
    if cfg.head_kind == "masked_lm":
        state = lm_bias_state(state, "cls.predictions.bias", "cls.predictions.decoder.bias")
    if hf.get("share_att_key", False):
        for separate, shared in _shared_pairs(cfg):
            if shared in state:
                state[separate] = state[shared]
    return state


def finish_export(model: nn.Module, hf: dict, state: dict[str, Tensor]) -> None:
    """Write `share_att_key=true` (and each shared tensor once) when every position projection equals its
    layer's query/key projection exactly; otherwise keep the separate projections."""
    pairs = _shared_pairs(model.cfg)
    if pairs and all(torch.equal(state[separate], state[shared]) for separate, shared in pairs):
        hf["share_att_key"] = True
        for separate, _ in pairs:
            del state[separate]


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, prepare_state, finish_export))
