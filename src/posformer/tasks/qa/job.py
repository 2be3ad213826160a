"""The SQuAD v2 question-answering job behind `posformer qa train` and `posformer qa eval`.

    options = QAJobOptions(head="seq2seq", train_file="train.json", output_dir="runs/qa")
    report = train_qa(options)          # checkpoints, metrics.jsonl, loss.png, predictions, eval_results.json
    report = eval_qa(QAJobOptions(model="runs/qa", eval_file="dev.json"))

Data: `posformer.tasks.qa.job_data` (the shipped sample split by article without a data flag).

Models (`posformer.tasks.qa.models`; without --model: the bundled all-MiniLM-L6-v2):
--head seq2seq starts from an encoder-decoder checkpoint (T5, BERT2BERT, a `qa train` run) or
warm-starts a BERT2BERT encoder-decoder from a BERT checkpoint (`hf.bert2bert_from_pretrained`,
special ids from the tokenizer: `seq2seq.bert2bert_token_ids`); with --from-scratch it trains a
small `t5`-preset model with a tokenizer trained on the training texts. --head span starts from a
BERT-family checkpoint with a fresh span head.

Outputs: predictions.json (id -> text, "" for no answer), answers.json (id -> the best non-empty
answer whatever the null score, "" only when there is none), null_odds.json (id -> null score
minus best answer score; +-inf, when a question has no candidate of one kind, is clipped to
+-evaluation.NULL_ODDS_CLIP so the file is strict JSON) and eval_results.json (the official report:
exact/f1/HasAns/NoAns score predictions.json as it stands; best_* are the official best
threshold over null_odds.json applied to answers.json, which is how the official script means
its --na-prob-file to be used: `qa score --predictions answers.json --na-probs null_odds.json`
gives them. Scoring best_* on predictions.json instead, as run_qa.py's files would, can never
recover an answer that the threshold already turned into "").
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import yaml

from posformer.data.squad import QAExample
from posformer.model import Transformer
from posformer.tasks.qa.evaluation import QAEvaluator
from posformer.tasks.qa.extractive import SpanPredictor, span_train_tensors
from posformer.tasks.qa.job_data import calibration_split, load_eval_examples, load_train_examples
from posformer.tasks.qa.models import default_pretrained_model, fine_tuning_changes, load_qa_model
from posformer.tasks.qa.null_answers import (
    calibrate_null_threshold,
    keep_null_windows,
    seq2seq_null_windows,
    span_null_windows,
)
from posformer.tasks.qa.options import (
    GROUP_BATCHES,
    HEADS,
    PREDICTION_OPTIONS,
    PRETRAINED_DEFAULTS,
    SCRATCH_DEFAULTS,
    QAJobOptions,
    check_options,
)
from posformer.tasks.qa.predictor import QAPredictor
from posformer.tasks.qa.resume import qa_resume_policy, recorded_options, warmup_steps
from posformer.tasks.qa.seq2seq import (
    Seq2SeqPredictor,
    build_scratch_t5,
    end_token_id,
    qa_training_texts,
    seq2seq_train_tensors,
    train_qa_tokenizer,
)
from posformer.train.distributed import resolve_device
from posformer.train.precision import PRECISION_NAMES, autocast, resolve_precision
from posformer.train.write_errors import writing
from posformer.utils.safe_write import write_text_atomic
from posformer.utils.tokenizer_config import saved_tokenizer_files
from posformer.utils.validation import check_choice, fail

if TYPE_CHECKING:
    from posformer.train.settings import TrainerSettings


def scratch_seq2seq(o: QAJobOptions, train: Sequence[QAExample], changes: dict[str, Any]) -> tuple[Transformer, Any]:
    """A small `t5`-preset model and a tokenizer trained on the training texts (or, with --resume, the run's)."""
    from posformer.hf import load_tokenizer

    if o.d_model % o.heads:
        fail("--d-model", o.d_model, f"a multiple of --heads ({o.heads})")
    run = Path(o.output_dir)
    if o.resume and (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        from posformer.loading import checkpoint_dir

        tokenizer = load_tokenizer(checkpoint_dir(run))
    else:
        tokenizer = train_qa_tokenizer(qa_training_texts(train), kind=o.tokenizer, vocab_size=o.vocab_size)
    torch.manual_seed(o.seed)
    model = build_scratch_t5(
        tokenizer,
        d_model=o.d_model,
        n_layers=o.layers,
        n_decoder_layers=o.layers,
        n_heads=o.heads,
        d_head=o.d_model // o.heads,
        d_ff=o.d_ff,
        max_positions=max(512, o.max_seq_length),
        **changes,
    )
    return model, tokenizer


def check_window_fits(o: QAJobOptions, model: Transformer) -> None:
    """Refuse a --max-seq-length the model's encoder cannot read (a learned position table), before any work."""
    from posformer import positions

    cfg = model.cfg
    longest = positions.get(cfg.position).max_length(cfg.position_params, cfg.max_positions)
    if longest is not None and o.max_seq_length > longest:
        fail(
            "--max-seq-length",
            o.max_seq_length,
            f"at most {longest}, the positions this model's "
            f"{cfg.position!r} encoding can represent (Config.max_positions={cfg.max_positions})",
        )


def qa_predictor(head: str, tokenizer, examples: Sequence[QAExample], o: QAJobOptions) -> QAPredictor:
    """The predictor of `head` on `examples`, with the job's windowing and answer options."""
    if head == "span":
        return SpanPredictor(
            tokenizer,
            examples,
            o.max_seq_length,
            o.doc_stride,
            batch_size=o.per_device_eval_batch_size,
            n_best_size=o.n_best_size,
            max_answer_length=o.max_answer_length,
            null_score_diff_threshold=o.null_score_diff_threshold,
        )
    return Seq2SeqPredictor(
        tokenizer,
        examples,
        o.max_seq_length,
        o.doc_stride,
        batch_size=o.per_device_eval_batch_size,
        num_beams=o.num_beams,
        max_answer_tokens=o.max_answer_length,
        null_score_diff_threshold=o.null_score_diff_threshold,
        null_score=o.null_score,
    )


def eval_settings(o: QAJobOptions) -> dict[str, Any]:
    """The options that shape predictions, recorded in eval_results.json beside the scores."""
    return {k: getattr(o, k) for k in PREDICTION_OPTIONS}


def print_report(report: dict[str, Any], log: Callable[[str], None] = print) -> None:
    """The official keys (exact, f1, total, HasAns_*, NoAns_*, best_*) as JSON, as `qa score` prints them,
    then F1 beside the F1 of answering nothing (the share of unanswerable questions)."""
    log(json.dumps(report, indent=2))
    if report.get("total"):
        unanswerable = report.get("NoAns_total", 0)
        baseline = 100.0 * unanswerable / report["total"]
        line = (
            f"F1 {report['f1']:.2f} against {baseline:.2f} for answering nothing ({unanswerable} of "
            f"{report['total']} questions have no answer)"
        )
        if "HasAns_f1" in report:
            line += f"; HasAns F1 {report['HasAns_f1']:.2f}, NoAns F1 {report.get('NoAns_f1', 0.0):.2f}"
        log(line)


def train_qa(o: QAJobOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train a QA model as `qa train` does, evaluate it at the end, write the outputs; returns the report."""
    from posformer.tasks.qa.feature_batches import FeatureBatches
    from posformer.train.trainer import Trainer

    o, device = _train_job(o)
    train, held = load_train_examples(o, log)
    model, tokenizer, source = _qa_model(o, train)
    check_window_fits(o, model)
    train, calibration = calibration_split(train, o.calibration_fraction)
    group_size = GROUP_BATCHES * o.per_device_train_batch_size if o.group_by_length else None
    batches = FeatureBatches(_train_features(o, train, tokenizer, model), o.seed, group_size=group_size)
    steps = o.max_steps or math.ceil(math.ceil(len(batches) / o.per_device_train_batch_size) * o.num_train_epochs)
    if steps < 1:
        raise ValueError(f"no training steps: --max-steps / --num-train-epochs give {steps}")
    evaluator = QAEvaluator(qa_predictor(o.head, tokenizer, held, o))
    warmup = warmup_steps(o.output_dir, o.resume, o.warmup_ratio, steps)
    kind = "BERT2BERT" if model.cfg.hf_model_type == "encoder-decoder" else model.cfg.hf_model_type or model.cfg.arch
    log(
        f"{o.head} QA: {source} ({kind}), {model.num_parameters():,} parameters; {len(train)} training questions "
        f"({len(batches)} windows), {len(held)} eval questions; {steps} steps of {o.per_device_train_batch_size} "
        f"in {PRECISION_NAMES[o.precision]} on {device}; writing to {o.output_dir}"
    )
    run_config = {"qa": {**dataclasses.asdict(o), "steps": steps, "warmup_steps": warmup}, "model": model.cfg.to_dict()}
    trainer = Trainer(
        model,
        batches,
        _trainer_settings(o, steps, warmup),
        o.output_dir,
        evaluate=evaluator if o.eval_steps or not calibration else None,  # calibrated: evaluated after
        run_config=run_config,
        extra_files=saved_tokenizer_files(tokenizer),
        log=log,
        progress=o.progress,
        resume_policy=qa_resume_policy(),
    )
    result = trainer.fit(resume=o.resume)
    model.eval()
    if calibration:
        o = _calibrated(o, model, tokenizer, calibration, evaluator, run_config, device, log)
    if calibration or not result.evals or result.evals[-1].get("step") != result.step:
        evaluator(model)
    recorded = {"head": o.head, "model": source, "step": result.step, "checkpoint": str(result.checkpoint or "")}
    with writing(o.output_dir, "the evaluation outputs in"):
        results = evaluator.write(o.output_dir, {**recorded, "training_precision": o.precision, **eval_settings(o)})
    print_report(evaluator.report, log)
    return results


def _train_job(o: QAJobOptions) -> tuple[QAJobOptions, torch.device]:
    """The options of a training job with their defaults resolved and checked, and the device it runs on; the
    output dir checked before anything is loaded."""
    from posformer.train.run_lock import check_output_dir

    o = dataclasses.replace(o, head=o.head or "seq2seq", output_dir=o.output_dir or "runs/qa")
    o = o.resolved(SCRATCH_DEFAULTS if o.from_scratch else PRETRAINED_DEFAULTS)
    check_options(o)
    check_output_dir(Path(o.output_dir))
    device = resolve_device(o.device)
    o = dataclasses.replace(o, precision=resolve_precision(o.precision, device))  # the run records what it used
    if o.head == "seq2seq" and o.null_score not in (None, "decoder") and not o.encoder_span_loss:
        fail("--null-score", o.null_score, "decoder without --encoder-span-loss (which trains that span head)")
    return o, device


def _qa_model(o: QAJobOptions, train: Sequence[QAExample]) -> tuple[Transformer, Any, str]:
    """The model to fine-tune (from scratch, or `--model` / the bundled checkpoint), its tokenizer, and where it
    came from; dropout and the encoder span head set before it is built (`fine_tuning_changes`)."""
    changes = fine_tuning_changes(o.dropout, o.encoder_span_loss if o.head == "seq2seq" else None)
    if o.from_scratch:
        model, tokenizer = scratch_seq2seq(o, train, changes)
        source = "scratch t5"
    else:
        path = o.model or default_pretrained_model()
        torch.manual_seed(o.seed)
        model, tokenizer, _, directory = load_qa_model(
            path, o.head, o.cross_attention_init, o.decoder_layers, o.pointer_generator, changes
        )
        source = str(directory)
    return model, tokenizer, source


def _train_features(
    o: QAJobOptions, train: Sequence[QAExample], tokenizer: Any, model: Transformer
) -> dict[str, torch.Tensor]:
    """The training windows of the head's kind, with the unanswerable ones kept at `--keep-null-windows`."""
    if o.head == "span":
        features = span_train_tensors(train, tokenizer, o.max_seq_length, o.doc_stride, model.cfg)
        null = span_null_windows(features, tokenizer.cls_token_id)
    else:
        features = seq2seq_train_tensors(
            train,
            tokenizer,
            o.max_seq_length,
            o.doc_stride,
            o.max_answer_length,
            end_token_id(model.cfg),
            span_positions=bool(o.encoder_span_loss),
        )
        null = seq2seq_null_windows(features, end_token_id(model.cfg))
    return keep_null_windows(features, null, o.keep_null_windows, o.seed)


def _trainer_settings(o: QAJobOptions, steps: int, warmup: int) -> TrainerSettings:
    """The Trainer's settings of a QA job: AdamW, linear decay to 0 after `warmup` steps, as run_seq2seq_qa.py."""
    from posformer.train.settings import TrainerSettings

    return TrainerSettings(
        steps=steps,
        batch_size=o.per_device_train_batch_size,
        lr=o.learning_rate,
        schedule="linear",
        min_lr_ratio=0.0,
        warmup=warmup,
        weight_decay=o.weight_decay,
        betas=(0.9, 0.999),
        precision=o.precision,
        device=o.device,
        eval_every=o.eval_steps or steps,
        save_every=min(o.save_steps, steps),
        log_every=10,
        seed=o.seed,
        sample_prompt=None,
    )


def _calibrated(
    o: QAJobOptions,
    model: Transformer,
    tokenizer: Any,
    calibration: Sequence[QAExample],
    evaluator: QAEvaluator,
    run_config: dict[str, Any],
    device: torch.device,
    log: Callable[[str], None],
) -> QAJobOptions:
    """The options with the null threshold calibrated on the held-out training questions, which the evaluator
    and the run's run_config.yaml then take."""
    with torch.no_grad(), autocast(evaluator.precision, device):
        threshold = calibrate_null_threshold(qa_predictor(o.head, tokenizer, calibration, o), o.head, model)
    o = dataclasses.replace(o, null_score_diff_threshold=threshold)
    log(
        f"null threshold calibrated on {len(calibration)} held-out training questions: "
        f"--null-score-diff-threshold {o.null_score_diff_threshold:.4g}"
    )
    evaluator.predictor.null_score_diff_threshold = o.null_score_diff_threshold
    run_config["qa"]["null_score_diff_threshold"] = o.null_score_diff_threshold
    with writing(Path(o.output_dir) / "run_config.yaml", "the run config"):
        write_text_atomic(Path(o.output_dir) / "run_config.yaml", yaml.safe_dump(run_config, sort_keys=False))
    return o


def _run_options(directory: Path) -> dict[str, Any]:
    """The `qa` options a training run stored in run_config.yaml (the run dir or a checkpoint's run dir)."""
    for candidate in (directory, directory.parent.parent):
        if (candidate / "run_config.yaml").is_file():
            return recorded_options(candidate)
    return {}


def prediction_options(o: QAJobOptions, directory: Path, head: str) -> QAJobOptions:
    """`o` for predicting with the model in `directory` with `head`, checked: every prediction option
    left None (PREDICTION_OPTIONS) takes the training run's (run_config.yaml), else PRETRAINED_DEFAULTS."""
    stored = _run_options(directory)
    o = o.resolved({k: stored.get(k, PRETRAINED_DEFAULTS[k]) for k in PREDICTION_OPTIONS})
    o = dataclasses.replace(o, head=head)
    check_options(o)
    return o


def eval_qa(o: QAJobOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate a trained model as `qa eval` does: predict, print the report, write the three output files.

    Prediction options left unset take the training run's (`prediction_options`), else the seed's.
    """
    if o.model is None:
        raise ValueError("qa eval needs --model (a `qa train` output dir, a checkpoint or a model dir)")
    if o.head is not None:
        check_choice("--head", o.head, HEADS)
    from posformer.train.run_lock import check_output_dir

    check_output_dir(Path(o.output_dir or o.model))
    model, tokenizer, head, directory = load_qa_model(o.model, o.head)
    o = dataclasses.replace(prediction_options(o, directory, head), output_dir=o.output_dir or str(o.model))
    check_window_fits(o, model)
    stored = _run_options(directory)
    if o.eval_file is None and o.dataset_name is None and o.train_file is None and stored.get("train_file"):
        o = dataclasses.replace(o, train_file=stored["train_file"])
    examples = load_eval_examples(o, log)
    device = resolve_device(o.device)
    o = dataclasses.replace(o, precision=resolve_precision(o.precision, device))
    evaluator = QAEvaluator(qa_predictor(head, tokenizer, examples, o), o.precision)
    evaluator(model.to(device))
    info = {"head": head, "model": str(directory), "precision": o.precision, **eval_settings(o)}
    with writing(o.output_dir, "the evaluation outputs in"):
        results = evaluator.write(o.output_dir, info)
    print_report(evaluator.report, log)
    return results
