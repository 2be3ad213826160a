"""Warm-start a BERT2BERT encoder-decoder from one BERT checkpoint (Rothe, Narayan & Severyn 2020).

`bert2bert_from_pretrained(dir)` builds what Hugging Face's
`EncoderDecoderModel.from_encoder_decoder_pretrained(dir, dir)` builds, as a posformer model
(encoder_decoder.py's layout, so `to_hf` writes an `EncoderDecoderModel`):

- the encoder is the checkpoint's BERT (its pooler and any task head dropped);
- the decoder is a second copy of it, made causal, with its own token and token-type
  embeddings (`Config.separate_decoder_embeddings`; not shared with the encoder);
- the decoder's new cross-attention layers and, unless the checkpoint has BERT's masked-LM head
  (BertForMaskedLM, BertForPreTraining: then it is copied), its LM head are freshly initialised
  as BERT initialises them: linear weights N(0, initializer_range), biases 0, LayerNorm 1 and 0,
  the LM bias 0; the LM head's weight is tied to the decoder's word embeddings (the checkpoint's
  tie_word_embeddings; an untied masked-LM decoder weight is copied).

Fresh weights are drawn from torch's global generator: seed it (`torch.manual_seed`) first for a
reproducible model.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from posformer.config import Config
from posformer.hf.api import from_hf
from posformer.hf.encoder_decoder import MODEL_TYPE
from posformer.hf.family import UnsupportedCheckpoint
from posformer.model import Transformer

# posformer names of the BERT body -> the BERT2BERT tensors they start (the stack prefix is swapped)
EMBEDDINGS = {
    "embed_tokens.weight": ("embed_tokens.weight", "decoder_embed_tokens.weight"),
    "token_types.weight": ("token_types.weight", "decoder_token_types.weight"),
}
CROSS_ATTENTION_INITS = ("random", "self_attention")
MASKED_LM_HEAD = ("head.dense.weight", "head.dense.bias", "head.norm.weight", "head.norm.bias", "head.proj.bias")


def bert2bert_config(
    bert: Config,
    decoder_start_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    decoder_layers: int | None = None,
    pointer_generator: bool = False,
) -> Config:
    """The BERT2BERT `Config` of a BERT `Config` (arch "encoder"): two stacks of its size (the decoder's first
    `decoder_layers` only, when given), the decoder with its own embeddings and BERT's LM head (and a
    pointer-generator with `pointer_generator`, which Hugging Face has not). Special ids left None keep BERT's
    (decoder start: none)."""
    if decoder_layers is not None and not (isinstance(decoder_layers, int) and 1 <= decoder_layers <= bert.n_layers):
        raise ValueError(f"decoder_layers={decoder_layers!r} is invalid: expected an integer in [1, {bert.n_layers}]")
    if bert.arch != "encoder" or bert.hf_model_type != "bert":
        raise UnsupportedCheckpoint(
            f"a BERT2BERT model is warm-started from a BERT checkpoint (model_type 'bert'); "
            f"this one is a {bert.arch} of model_type {bert.hf_model_type!r}"
        )
    ids = {"eos_token_id": eos_token_id, "pad_token_id": pad_token_id}
    return bert.replace(
        arch="encoder_decoder",
        n_decoder_layers=decoder_layers or bert.n_layers,
        head="seq2seq_lm",
        separate_decoder_embeddings=True,
        head_transform=True,
        head_bias=True,
        pointer_generator=pointer_generator,
        decoder_start_token_id=decoder_start_token_id,
        hf_model_type=MODEL_TYPE,
        **{k: v for k, v in ids.items() if v is not None},
    )


def bert2bert_from_pretrained(
    path_or_hub_id: str | os.PathLike,
    decoder_start_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    cross_attention_init: str = "random",
    decoder_layers: int | None = None,
    pointer_generator: bool = False,
    changes: dict[str, Any] | None = None,
) -> Transformer:
    """A BERT2BERT `Transformer` warm-started from the BERT checkpoint at `path_or_hub_id` (see the module doc).

    decoder_start_token_id, eos_token_id, pad_token_id: the special ids of the new model (None: BERT's
    config's, and no decoder start, as transformers leaves them); a BERT tokenizer's are [CLS], [SEP]
    and [PAD]. cross_attention_init: "random" (BERT's initialisation, as transformers does) or
    "self_attention" (each decoder layer's cross-attention starts as a copy of that layer's trained
    self-attention: q from its query rows, k and v from its key and value rows, the output projection and the
    norm after it likewise), so that the decoder starts by attending to context tokens like its own.
    decoder_layers: the decoder keeps BERT's first this many layers (None: all), as `EncoderDecoderModel` with
    the decoder config's `num_hidden_layers` set so. pointer_generator: the decoder may also copy source tokens
    (`Config.pointer_generator`; its weights start fresh, as BERT initialises linear layers). changes: further
    `Config` fields of the new model (dropout rates, `encoder_span_loss`), set before it is built.
    Returns the model in eval mode, as transformers does. Raises `UnsupportedCheckpoint` for a checkpoint that
    is not a BERT.
    """
    if cross_attention_init not in CROSS_ATTENTION_INITS:
        raise ValueError(
            f"cross_attention_init={cross_attention_init!r} is invalid: expected one of {CROSS_ATTENTION_INITS}"
        )
    bert = from_hf(path_or_hub_id)
    cfg = bert2bert_config(
        bert.cfg, decoder_start_token_id, eos_token_id, pad_token_id, decoder_layers, pointer_generator
    ).replace(**(changes or {}))
    model = Transformer(cfg)
    source, target = bert.state_dict(), model.state_dict()
    copies: dict[str, str] = {}
    for name in source:
        if name.startswith("encoder."):
            copies[name] = name
            if "decoder." + name.removeprefix("encoder.") in target:  # the decoder may keep fewer layers
                copies["decoder." + name.removeprefix("encoder.")] = name
        elif name in EMBEDDINGS:
            copies.update({ours: name for ours in EMBEDDINGS[name]})
    if bert.cfg.head_kind == "masked_lm":
        copies.update({name: name for name in MASKED_LM_HEAD})
        if not bert.cfg.tie_embeddings:
            copies["head.proj.weight"] = "head.proj.weight"
    with torch.no_grad():
        for ours, theirs in copies.items():
            target[ours].copy_(source[theirs])
        if cross_attention_init == "self_attention":
            _cross_from_self(target, cfg.decoder_layers, bert.cfg.d_model)
    return model.eval()


def _cross_from_self(state: dict[str, torch.Tensor], layers: int, width: int) -> None:
    """Copy each decoder layer's self-attention (fused qkv rows [q; k; v], output, norm) into its
    cross-attention (q; kv = [k; v]; output; norm), in place."""
    for i in range(layers):
        layer = f"decoder.layers.{i}."
        for kind in ("weight", "bias"):
            fused = state[f"{layer}attn.qkv.{kind}"]
            state[f"{layer}cross_attn.q.{kind}"].copy_(fused[:width])
            state[f"{layer}cross_attn.kv.{kind}"].copy_(fused[width:])
            state[f"{layer}cross_attn.out.{kind}"].copy_(state[f"{layer}attn.out.{kind}"])
            state[f"{layer}cross_res.norm.{kind}"].copy_(state[f"{layer}attn_res.norm.{kind}"])
