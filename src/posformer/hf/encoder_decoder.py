"""Hugging Face `EncoderDecoderModel` (model_type "encoder-decoder") with a BERT encoder and a BERT decoder.

BERT2BERT (Rothe, Narayan & Severyn 2020, "Leveraging Pre-trained Checkpoints for Sequence
Generation Tasks"): what `EncoderDecoderModel.from_encoder_decoder_pretrained(bert, bert)` builds
and `bert2bert.bert2bert_from_pretrained` warm-starts. The HF config holds two BERT configs:

  encoder   a BertModel: `encoder.*`. Its pooler is read and dropped; `to_hf` writes none, so
            transformers initialises one (the logits never use it).
  decoder   a BertLMHeadModel with is_decoder and add_cross_attention: `decoder.bert.*`, each
            layer causal self-attention, then cross-attention (`crossattention.*`), then the FFN,
            every sub-layer post-LayerNorm; `decoder.cls.predictions.*` is BERT's LM head
            (transform + bias), its weight tied to `decoder.bert.embeddings.word_embeddings`
            unless the decoder config's tie_word_embeddings is false.

posformer: one `Config` with arch "encoder_decoder", `separate_decoder_embeddings` (the decoder's
`decoder_embed_tokens` / `decoder_token_types`), and head "seq2seq_lm" with `head_transform` and
`head_bias`. Each stack has its own learned position table and embedding LayerNorm. So the two BERT
configs must agree on every field but num_hidden_layers (and the decoder's tie_word_embeddings).
Special ids: the top-level decoder_start / pad / eos / bos ids, else the decoder config's, as
transformers' generation config resolves them.

With relative positions, transformers 4.57's BERT decoder gives every query of a several-token
forward pass the distances of the last one when it holds a cache (use_cache=True, its default);
posformer gives each query its own, as HF does with use_cache=False and step by step (generation).

Refused by name: another encoder or decoder model_type, tie_encoder_decoder, a decoder without
is_decoder and add_cross_attention, an encoder with either, cross_attention_hidden_size, hidden
sizes that differ (HF's enc_to_dec_proj) and any other field the two configs disagree on.
"""

from __future__ import annotations

from torch import Tensor

from posformer.config import Config
from posformer.hf import bert
from posformer.hf.family import Family, UnsupportedCheckpoint, architecture, register, unsupported
from posformer.hf.mapping import Rule, fused_linear, linear, norm, same

MODEL_TYPE = "encoder-decoder"
SUB_MODEL_TYPES = ("bert",)
DECODER_EMBEDDINGS = ("decoder_embed_tokens", "decoder_token_types")
HEAD = "decoder.cls.predictions"
# Config fields both BERT configs must agree on -> their Hugging Face names (for the messages)
SHARED = {
    "vocab_size": "vocab_size",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "d_ff": "intermediate_size",
    "activation": "hidden_act",
    "dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "max_positions": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "norm_eps": "layer_norm_eps",
    "position": "position_embedding_type",
    "init_std": "initializer_range",
}
SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


def _sub_config(hf: dict, name: str) -> dict:
    sub = hf.get(name)
    if not isinstance(sub, dict):
        raise UnsupportedCheckpoint(f"{MODEL_TYPE} config without an {name!r} sub-config (a dict) is not readable")
    if sub.get("model_type") not in SUB_MODEL_TYPES:
        raise unsupported(
            MODEL_TYPE, f"{name}.model_type={sub.get('model_type')!r} (supported: {', '.join(SUB_MODEL_TYPES)})"
        )
    return sub


def _bert_config(sub: dict, name: str) -> Config:
    """The BERT encoder `Config` of one sub-config, as a stack (no head, not causal); errors name `name`."""
    try:
        return bert.encoder_config(
            {**sub, "architectures": None, "is_decoder": False, "add_cross_attention": False}, "Bert"
        )
    except UnsupportedCheckpoint as err:
        raise UnsupportedCheckpoint(f"{name}: {err}") from None


def _check_features(hf: dict, enc: dict, dec: dict) -> None:
    if hf.get("tie_encoder_decoder"):
        raise unsupported(MODEL_TYPE, "encoder and decoder weights tied to each other (tie_encoder_decoder=True)")
    if not (dec.get("is_decoder") and dec.get("add_cross_attention")):
        raise unsupported(
            MODEL_TYPE,
            f"a decoder with decoder.is_decoder={bool(dec.get('is_decoder'))}, "
            f"decoder.add_cross_attention={bool(dec.get('add_cross_attention'))} "
            "(both must be true)",
        )
    if enc.get("is_decoder") or enc.get("add_cross_attention"):
        raise unsupported(
            MODEL_TYPE, "a causal or cross-attending encoder (encoder.is_decoder / encoder.add_cross_attention)"
        )
    if dec.get("cross_attention_hidden_size") is not None:
        raise unsupported(MODEL_TYPE, f"decoder.cross_attention_hidden_size={dec['cross_attention_hidden_size']}")


def _special_id(hf: dict, dec: dict, name: str) -> int | None:
    """The top-level id, else the decoder config's (BERT's pad_token_id defaults to 0), as transformers'
    generation config resolves them; the first of a list."""
    value = hf.get(name)
    if value is None:
        value = dec.get(name, 0 if name == "pad_token_id" else None)
    return value[0] if isinstance(value, list) else value


def config_from_hf(hf: dict) -> Config:
    enc, dec = _sub_config(hf, "encoder"), _sub_config(hf, "decoder")
    _check_features(hf, enc, dec)
    architecture(hf, {"EncoderDecoderModel": "seq2seq_lm"}, "seq2seq_lm")
    encoder, decoder = _bert_config(enc, "encoder"), _bert_config(dec, "decoder")
    for field, name in SHARED.items():
        ours, theirs = getattr(decoder, field), getattr(encoder, field)
        if ours != theirs or (field == "position" and decoder.position_params != encoder.position_params):
            extra = " (transformers projects with enc_to_dec_proj)" if field == "d_model" else ""
            raise unsupported(
                MODEL_TYPE,
                f"decoder.{name}={dec.get(name, ours)!r} different from encoder.{name}="
                f"{enc.get(name, theirs)!r}{extra}",
            )
    ids = {name: _special_id(hf, dec, name) for name in SPECIAL_IDS}
    return encoder.replace(
        arch="encoder_decoder",
        n_decoder_layers=decoder.n_layers,
        head="seq2seq_lm",
        separate_decoder_embeddings=True,
        head_transform=True,
        head_bias=True,
        tie_embeddings=bool(dec.get("tie_word_embeddings", True)),
        hf_model_type=MODEL_TYPE,
        **ids,
    )


def config_to_hf(cfg: Config) -> dict:
    wanted = {
        "arch": "encoder_decoder",
        "separate_decoder_embeddings": True,
        "head_kind": "seq2seq_lm",
        "head_transform": True,
        "head_transform_bias": True,
        "head_bias": True,
    }
    problems = [f"{k}={getattr(cfg, k)!r}" for k, v in wanted.items() if getattr(cfg, k) != v]
    if cfg.scale_tied_head and cfg.tie_embeddings:
        problems.append("scale_tied_head=True")
    if problems:
        raise unsupported(
            MODEL_TYPE,
            f"a layout BERT2BERT cannot express ({'; '.join(problems)}; it needs "
            f"{', '.join(f'{k}={v!r}' for k, v in wanted.items())}) (to_hf)",
        )
    stack = cfg.replace(
        arch="encoder",
        head="none",
        separate_decoder_embeddings=False,
        head_transform=False,
        head_bias=False,
        decoder_start_token_id=None,
        hf_model_type="bert",
    )
    encoder = bert.config_to_hf(stack)
    decoder = {
        **bert.config_to_hf(stack.replace(n_layers=cfg.decoder_layers)),
        "architectures": ["BertLMHeadModel"],
        "is_decoder": True,
        "add_cross_attention": True,
        "tie_word_embeddings": cfg.tie_embeddings,
    }
    return {
        "model_type": MODEL_TYPE,
        "architectures": ["EncoderDecoderModel"],
        "encoder": encoder,
        "decoder": decoder,
        "is_encoder_decoder": True,
        "tie_encoder_decoder": False,
        **{name: getattr(cfg, name) for name in SPECIAL_IDS},
    }


def _cross_attention(cfg: Config, i: int) -> list[Rule]:
    """Decoder layer i's cross-attention: BERT's `crossattention` (query; key, value fused; output, norm)."""
    ours, theirs = f"decoder.layers.{i}", f"decoder.bert.encoder.layer.{i}.crossattention"
    d = cfg.d_model
    out = linear(f"{ours}.cross_attn.q", f"{theirs}.self.query")
    out += fused_linear(f"{ours}.cross_attn.kv", (f"{theirs}.self.key", f"{theirs}.self.value"), (d, d), bias=True)
    out += linear(f"{ours}.cross_attn.out", f"{theirs}.output.dense")
    return out + norm(f"{ours}.cross_res.norm", f"{theirs}.output.LayerNorm")


def rules(cfg: Config) -> list[Rule]:
    out = bert.stack_rules(cfg, "encoder.")
    out += bert.stack_rules(cfg, "decoder.bert.", "decoder", cfg.decoder_layers, DECODER_EMBEDDINGS)
    for i in range(cfg.decoder_layers):
        out += _cross_attention(cfg, i)
    out += linear("head.dense", f"{HEAD}.transform.dense") + norm("head.norm", f"{HEAD}.transform.LayerNorm")
    out.append(bert.lm_bias_rule(cfg, f"{HEAD}.bias", f"{HEAD}.decoder.bias"))
    if not cfg.tie_embeddings:
        out.append(same("head.proj.weight", f"{HEAD}.decoder.weight"))
    return out


def ignore(cfg: Config) -> tuple[str, ...]:
    """The encoder's pooler, id buffers of old checkpoints, the LM head's copy of a tied weight."""
    patterns = [
        r"encoder\.pooler\.dense\.(weight|bias)",
        r"(encoder|decoder\.bert)\.embeddings\.(position_ids|token_type_ids)",
    ]
    if cfg.tie_embeddings:
        patterns.append(r"decoder\.cls\.predictions\.decoder\.(weight|bias)")
    return tuple(patterns)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    return bert.lm_bias_state(state, f"{HEAD}.bias", f"{HEAD}.decoder.bias")


FAMILY = register(Family((MODEL_TYPE,), config_from_hf, config_to_hf, rules, ignore, prepare_state=prepare_state))
