"""BERT: post-LayerNorm encoder with learned absolute or relative (Shaw-style) positions.

Hugging Face `position_embedding_type` "absolute", "relative_key" and
"relative_key_query" become posformer positions "learned", "relative_key" and
"relative_key_query". Word, token-type and position embeddings are summed and
normalised (`Config.embed_norm`); every sub-layer is post-norm.

Heads (from the config's `architectures`; none given: BertModel):
  BertModel                     -> head "none" (`last_hidden_state`). The pooler
                                   (`pooler.dense`) is read and dropped: posformer's
                                   base model has no `pooler_output`, and `to_hf`
                                   writes no pooler, so transformers initialises one.
  BertForMaskedLM,              -> "masked_lm" (the pooler and next-sentence head of
  BertForPreTraining               BertForPreTraining are dropped; `to_hf` writes BertForMaskedLM).
  BertForQuestionAnswering      -> "span_qa" (`qa_outputs`).
  BertForSequenceClassification -> "classification" (`bert.pooler.dense` + `classifier`).
Other classes (BertLMHeadModel, is_decoder, cross-attention) are refused by name; a BERT decoder
is read as the decoder of an EncoderDecoderModel (encoder_decoder.py).

Old checkpoints converted from TensorFlow (bert-base-uncased among them) name the
LayerNorm parameters `gamma` / `beta`; they are read as `weight` / `bias`, as
transformers does. A base model stored with its task prefix (`bert.`) is read
without it, and the task's head tensors are dropped.

With relative positions Hugging Face still keeps an (unused) absolute table,
`embeddings.position_embeddings.weight`: it is read and dropped on load, and
written as zeros by `to_hf` so that transformers loads every tensor it expects.
The encoder rules here are shared with RoBERTa (roberta.py); `stack_rules` also maps the two
stacks of a BERT2BERT encoder-decoder (encoder_decoder.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from posformer.config import Config
from posformer.hf.family import Family, architecture, register, unsupported
from posformer.hf.layout import PLAIN_LAYERS, require_fields
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same

POSITIONS = {"absolute": "learned", "relative_key": "relative_key", "relative_key_query": "relative_key_query"}
HF_POSITIONS = {ours: theirs for theirs, ours in POSITIONS.items()}
HIDDEN_ACT = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "swish",
}
HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu", "swish": "swish"}
HEADS = {
    "ForMaskedLM": "masked_lm",
    "ForPreTraining": "masked_lm",
    "ForQuestionAnswering": "span_qa",
    "ForSequenceClassification": "classification",
    "Model": "none",
}  # suffixes of the class names
HEAD_CLASSES = {
    "masked_lm": "ForMaskedLM",
    "span_qa": "ForQuestionAnswering",
    "classification": "ForSequenceClassification",
    "none": "Model",
}


def num_labels(hf: dict) -> int:
    """HF stores the label count as `id2label` (or, in hand-written configs, `num_labels`)."""
    return len(hf["id2label"]) if hf.get("id2label") else int(hf.get("num_labels", 2))


def encoder_config(hf: dict, arch_name: str, **changes) -> Config:
    """The `Config` of a BERT-layout encoder (BERT, RoBERTa); `changes` override fields (positions, ids).

    arch_name: the class-name prefix ("Bert"), so that e.g. BertLMHeadModel is not taken for BertModel.
    A config without `architectures` gets head "none".

    Raises `UnsupportedCheckpoint` naming a config feature posformer does not implement.
    """
    model_type = hf["model_type"]
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise unsupported(model_type, "is_decoder / add_cross_attention (a causal or cross-attending BERT)")
    kind = hf.get("position_embedding_type", "absolute")
    if kind not in POSITIONS:
        raise unsupported(model_type, f"position_embedding_type={kind!r} (supported: {', '.join(POSITIONS)})")
    act = hf.get("hidden_act", "gelu")
    if act not in HIDDEN_ACT:
        raise unsupported(model_type, f"hidden_act={act!r} (supported: {', '.join(HIDDEN_ACT)})")
    head = architecture(hf, {arch_name + suffix: head for suffix, head in HEADS.items()}, "none")
    if head == "span_qa" and num_labels(hf) != 2:
        raise unsupported(model_type, f"a question-answering head with num_labels={num_labels(hf)} (expected 2)")
    fields = dict(
        arch="encoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_layers=hf["num_hidden_layers"],
        n_heads=hf["num_attention_heads"],
        d_ff=hf.get("intermediate_size", 3072),
        position=POSITIONS[kind],
        max_positions=hf.get("max_position_embeddings", 512),
        norm="layernorm",
        norm_eps=hf.get("layer_norm_eps", 1e-12),
        norm_placement="post",
        embed_norm=True,
        activation=HIDDEN_ACT[act],
        dropout=hf.get("hidden_dropout_prob", 0.1),
        attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
        type_vocab_size=hf.get("type_vocab_size", 2),
        head=head,
        num_labels=num_labels(hf) if head == "classification" else 2,
        pad_token_id=hf.get("pad_token_id", 0),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id"),
        init_std=hf.get("initializer_range", 0.02),
        hf_model_type=model_type,
    )
    return Config(**{**fields, **changes})


def config_from_hf(hf: dict) -> Config:
    return encoder_config(hf, "Bert")


def plain_encoder_fields(cfg: Config) -> dict:
    """The fields a BERT-layout encoder (BERT, RoBERTa, DeBERTa-v2) has one value of: every layer one full attention
    without QK-norm, no transform before a QA or classification head, BERT's own MLM head."""
    mlm = {"mlm_head": "bert", "head_transform_bias": True} if cfg.head_kind == "masked_lm" else {}
    return {**PLAIN_LAYERS, "head_transform": False, **mlm}


def encoder_config_to_hf(cfg: Config, arch_name: str) -> dict:
    """The HF config of a BERT-layout encoder; raises `UnsupportedCheckpoint` for what that layout cannot hold."""
    model_type = cfg.hf_model_type
    layout = (
        cfg.arch == "encoder"
        and cfg.norm == "layernorm"
        and cfg.norm_bias
        and cfg.norm_placement == "post"
        and cfg.embed_norm
        and not cfg.use_final_norm
        and not cfg.parallel_residual
        and cfg.qkv_bias
        and cfg.attn_out_bias
        and cfg.ffn_bias
        and cfg.kv_heads == cfg.n_heads
        and cfg.head_dim * cfg.n_heads == cfg.d_model
        and cfg.attn_scale is None
        and not cfg.scale_embeddings
    )
    if not layout:
        raise unsupported(
            model_type,
            "a layout other than BERT's (post-LayerNorm encoder, biases, embedding "
            "LayerNorm, multi-head attention with d_head = d_model / n_heads) (to_hf)",
        )
    if cfg.position not in HF_POSITIONS:
        raise unsupported(
            model_type, f"position={cfg.position!r} (Hugging Face has: {', '.join(HF_POSITIONS)}) (to_hf)"
        )
    if cfg.activation not in HF_ACT:
        raise unsupported(model_type, f"activation={cfg.activation!r} (supported: {', '.join(HF_ACT)}) (to_hf)")
    if cfg.type_vocab_size < 1:
        raise unsupported(model_type, "no token-type embeddings (type_vocab_size=0) (to_hf)")
    if cfg.head_kind not in HEAD_CLASSES:
        raise unsupported(model_type, f"head={cfg.head_kind!r} (supported: {', '.join(HEAD_CLASSES)}) (to_hf)")
    require_fields(cfg, model_type, **plain_encoder_fields(cfg))
    out = {
        "model_type": model_type,
        "architectures": [arch_name + HEAD_CLASSES[cfg.head_kind]],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.ff_dim,
        "hidden_act": HF_ACT[cfg.activation],
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "max_position_embeddings": cfg.max_positions,
        "type_vocab_size": cfg.type_vocab_size,
        "layer_norm_eps": cfg.norm_eps,
        "position_embedding_type": HF_POSITIONS[cfg.position],
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "is_decoder": False,
        "add_cross_attention": False,
    }
    if cfg.head_kind == "classification":
        out["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.num_labels)}
        out["label2id"] = {f"LABEL_{i}": i for i in range(cfg.num_labels)}
    return out


def config_to_hf(cfg: Config) -> dict:
    if cfg.position == "learned" and cfg.position_params["offset"] != 0:
        raise unsupported("bert", "learned positions with an offset (that is RoBERTa's layout) (to_hf)")
    return encoder_config_to_hf(cfg, "Bert")


def _with_unused_table(rule: Rule, key: str, shape: tuple[int, int]) -> Rule:
    """`rule`, plus HF's absolute position table `key` that relative encodings leave unused:
    read and dropped on load, written as zeros of `shape` (max_positions, d_model) by `to_hf`."""
    return Rule(
        rule.ours,
        rule.theirs + (key,),
        lambda ts: rule.to_ours(ts[:-1]),
        lambda t: rule.to_theirs(t) + [t.new_zeros(shape)],
    )


def stack_rules(
    cfg: Config,
    base: str,
    stack: str = "encoder",
    n_layers: int | None = None,
    embeddings: tuple[str, str] = ("embed_tokens", "token_types"),
) -> list[Rule]:
    """Embeddings and layers of one BERT-layout stack whose HF keys start with `base` ("", "bert.",
    "decoder.bert."): posformer's `stack` ("encoder" or "decoder"), its `n_layers` blocks (default
    `cfg.n_layers`) and the token / token-type embeddings named `embeddings`. Self-attention, FFN and
    norms only: a decoder's cross-attention is the caller's (encoder_decoder.py)."""
    emb = f"{base}embeddings"
    words_name, types_name = embeddings
    words = same(f"{words_name}.weight", f"{emb}.word_embeddings.weight")
    table = f"{emb}.position_embeddings.weight"
    out: list[Rule] = []
    if cfg.position == "learned":
        out += [words, same(f"{stack}.position.table.weight", table)]
    else:
        out.append(_with_unused_table(words, table, (cfg.max_positions, cfg.d_model)))
    out.append(same(f"{types_name}.weight", f"{emb}.token_type_embeddings.weight"))
    out += norm(f"{stack}.embed_norm", f"{emb}.LayerNorm")
    d = cfg.d_model
    for i in range(cfg.n_layers if n_layers is None else n_layers):
        ours, theirs = f"{stack}.layers.{i}", f"{base}encoder.layer.{i}"
        attn = f"{theirs}.attention"
        if cfg.position != "learned":
            out.append(same(f"{stack}.position.distance.{i}.weight", f"{attn}.self.distance_embedding.weight"))
        out += fused_linear(
            f"{ours}.attn.qkv", (f"{attn}.self.query", f"{attn}.self.key", f"{attn}.self.value"), (d, d, d), bias=True
        )
        out += linear(f"{ours}.attn.out", f"{attn}.output.dense")
        out += norm(f"{ours}.attn_res.norm", f"{attn}.output.LayerNorm")
        out += linear(f"{ours}.ffn.up", f"{theirs}.intermediate.dense")
        out += linear(f"{ours}.ffn.down", f"{theirs}.output.dense")
        out += norm(f"{ours}.ffn_res.norm", f"{theirs}.output.LayerNorm")
    return out


@dataclass(frozen=True)
class HeadKeys:
    """Where a BERT-like family keeps its head weights: the masked-LM head's dense, norm, bias, (untied) decoder
    and the decoder's own bias, and the classification head's pooler and classifier."""

    lm_dense: str
    lm_norm: str
    lm_bias: str
    lm_decoder: str
    lm_decoder_bias: str
    pooler: str
    classifier: str


BERT_HEADS = HeadKeys(
    "cls.predictions.transform.dense",
    "cls.predictions.transform.LayerNorm",
    "cls.predictions.bias",
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "bert.pooler.dense",
    "classifier",
)


def encoder_with_head_rules(cfg: Config, base: str, keys: HeadKeys) -> list[Rule]:
    """The encoder's rules under `base` (none for a bare model) and those of `cfg`'s head at `keys`."""
    kind = cfg.head_kind
    out = stack_rules(cfg, "" if kind == "none" else base)
    if kind == "masked_lm":
        out += linear("head.dense", keys.lm_dense)
        out += norm("head.norm", keys.lm_norm)
        out.append(lm_bias_rule(cfg, keys.lm_bias, keys.lm_decoder_bias))
        if not cfg.tie_embeddings:
            out.append(same("head.proj.weight", keys.lm_decoder))
    elif kind == "span_qa":
        out += linear("head.proj", "qa_outputs")
    elif kind == "classification":
        out += linear("head.pooler", keys.pooler)
        out += linear("head.proj", keys.classifier)
    return out


def rules(cfg: Config) -> list[Rule]:
    return encoder_with_head_rules(cfg, "bert.", BERT_HEADS)


def legacy_state(state: dict[str, Tensor], prefix: str, base_model: bool) -> dict[str, Tensor]:
    """`state` with `LayerNorm.gamma` / `.beta` renamed `.weight` / `.bias`; for a base model
    (`base_model`) stored with `prefix` ("bert."), only the prefixed tensors, without it."""
    renamed: dict[str, Tensor] = {}
    for key, tensor in state.items():
        if key.endswith("LayerNorm.gamma"):
            key = key.removesuffix("gamma") + "weight"
        elif key.endswith("LayerNorm.beta"):
            key = key.removesuffix("beta") + "bias"
        renamed[key] = tensor
    if base_model and any(key.startswith(prefix) for key in renamed):
        return {key.removeprefix(prefix): t for key, t in renamed.items() if key.startswith(prefix)}
    return renamed


def lm_bias_state(state: dict[str, Tensor], bias: str, decoder_bias: str) -> dict[str, Tensor]:
    """`state` with the masked-LM head's bias under both its names, `bias` and `decoder_bias`. transformers 4 ties
    the decoder's bias to the head's (one tensor, often stored once); transformers 5 ties them only with tied
    embeddings, and untied its decoder uses its own bias, so the decoder's, where stored, is the one used."""
    used = state.get(decoder_bias, state.get(bias))
    if used is not None:
        state[bias] = state[decoder_bias] = used
    return state


def lm_bias_rule(cfg: Config, bias: str, decoder_bias: str) -> Rule:
    """The masked-LM head's bias (the decoder's copy, `lm_bias_state`): with tied embeddings written once, as
    both versions save it; untied under both names, since transformers 5 reads the decoder's."""
    if cfg.tie_embeddings:
        return same("head.proj.bias", bias)
    return Rule("head.proj.bias", (bias, decoder_bias), lambda ts: ts[1], lambda t: [t, t.clone()])


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    state = legacy_state(state, "bert.", cfg.head_kind == "none")
    return lm_bias_state(state, BERT_HEADS.lm_bias, BERT_HEADS.lm_decoder_bias)


def ignore(cfg: Config) -> tuple[str, ...]:
    """Id buffers of old checkpoints, an unused pooler, the next-sentence head, a stored copy of the tied decoder."""
    patterns = [
        r"(bert\.)?embeddings\.(position_ids|token_type_ids)",
        r"cls\.seq_relationship\.(weight|bias)",
    ]
    if cfg.head_kind != "classification":
        patterns.append(r"(bert\.)?pooler\.dense\.(weight|bias)")
    if cfg.tie_embeddings:
        patterns.append(r"cls\.predictions\.decoder\.(weight|bias)")
    return tuple(patterns)


FAMILY = register(Family(("bert",), config_from_hf, config_to_hf, rules, ignore, prepare_state=prepare_state))
