"""RoBERTa: BERT's encoder (bert.py's rules) with positions offset past the padding id.

RoBERTa's learned table reserves rows 0 .. padding_idx, so posformer position p
reads row p + padding_idx + 1 (`position_params={"offset": pad_token_id + 1}`;
`max_positions` is `max_position_embeddings`, e.g. 514, of which 512 are usable).
One difference remains: Hugging Face derives RoBERTa's position ids from
`input_ids != padding_idx` (a cumulative count of the non-pad tokens), while
posformer counts from the first column (or takes `position_ids`). They agree on
every token of unpadded and right-padded rows (where the pad id appears only as
padding); for a left-padded row pass `position_ids` (the count of real tokens
before each one) to get RoBERTa's numbers.
Token types: one (`type_vocab_size=1`).

Heads: RobertaModel (none; the pooler is read and dropped, as for BERT),
RobertaForMaskedLM (masked_lm: `lm_head.dense`, `lm_head.layer_norm`, `lm_head.bias`,
the decoder tied to the word embeddings), RobertaForQuestionAnswering (span_qa) and
RobertaForSequenceClassification (classification: `classifier.dense` is the pooler,
`classifier.out_proj` the projection). RoBERTa's LM head always applies exact GELU,
whatever `hidden_act` is, so a masked LM with another activation is refused.
"""

from __future__ import annotations

from torch import Tensor

from posformer.config import Config
from posformer.hf.bert import (
    HeadKeys,
    encoder_config,
    encoder_config_to_hf,
    encoder_with_head_rules,
    legacy_state,
    lm_bias_state,
)
from posformer.hf.family import Family, register, unsupported
from posformer.hf.mapping import Rule

DEFAULT_PAD = 1


def config_from_hf(hf: dict) -> Config:
    pad = hf.get("pad_token_id", DEFAULT_PAD)
    changes = {"pad_token_id": pad, "type_vocab_size": hf.get("type_vocab_size", 1)}
    if hf.get("position_embedding_type", "absolute") == "absolute":
        changes["position_params"] = {"offset": pad + 1}
    cfg = encoder_config(hf, "Roberta", **changes)
    if cfg.head_kind == "masked_lm" and cfg.activation != "gelu":
        raise unsupported(
            hf["model_type"],
            f"a masked-LM head with hidden_act={hf.get('hidden_act')!r} "
            "(RoBERTa's LM head applies exact gelu, posformer's uses the "
            "model's activation)",
        )
    return cfg


def config_to_hf(cfg: Config) -> dict:
    model_type = cfg.hf_model_type
    if cfg.pad_token_id is None:
        raise unsupported(model_type, "no pad_token_id (RoBERTa's positions start at pad_token_id + 1) (to_hf)")
    if cfg.position == "learned" and cfg.position_params["offset"] != cfg.pad_token_id + 1:
        raise unsupported(
            model_type,
            f"learned positions with offset {cfg.position_params['offset']} "
            f"(Hugging Face uses pad_token_id + 1 = {cfg.pad_token_id + 1}) (to_hf)",
        )
    if cfg.head_kind == "masked_lm" and cfg.activation != "gelu":
        raise unsupported(
            model_type,
            f"a masked-LM head with activation={cfg.activation!r} (RoBERTa's LM head applies exact gelu) (to_hf)",
        )
    return encoder_config_to_hf(cfg, "Roberta")


ROBERTA_HEADS = HeadKeys(
    "lm_head.dense",
    "lm_head.layer_norm",
    "lm_head.bias",
    "lm_head.decoder.weight",
    "lm_head.decoder.bias",
    "classifier.dense",
    "classifier.out_proj",
)


def rules(cfg: Config) -> list[Rule]:
    return encoder_with_head_rules(cfg, "roberta.", ROBERTA_HEADS)


def prepare_state(cfg: Config, hf: dict, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """LayerNorm `gamma` / `beta` read as `weight` / `bias`; a base model stored with `roberta.` read without it."""
    state = legacy_state(state, "roberta.", cfg.head_kind == "none")
    return lm_bias_state(state, ROBERTA_HEADS.lm_bias, ROBERTA_HEADS.lm_decoder_bias)


def ignore(cfg: Config) -> tuple[str, ...]:
    """Id buffers of old checkpoints, the pooler (no posformer head uses it), a stored copy of the tied decoder."""
    patterns = [
        r"(roberta\.)?embeddings\.(position_ids|token_type_ids)",
        r"(roberta\.)?pooler\.dense\.(weight|bias)",
    ]
    if cfg.tie_embeddings:
        patterns.append(r"lm_head\.decoder\.(weight|bias)")
    return tuple(patterns)


FAMILY = register(Family(("roberta",), config_from_hf, config_to_hf, rules, ignore, prepare_state=prepare_state))
