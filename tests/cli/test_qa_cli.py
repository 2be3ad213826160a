"""`posformer qa train` / `qa eval` end to end: tiny seq2seq and span runs, output files, help and errors."""

from __future__ import annotations

import json

import pytest

from posformer.cli import main
from posformer.data.squad import load_squad_json, split_by_article, squad_sample
from posformer.tasks.qa.evaluation import NULL_ODDS_CLIP
from posformer.tasks.qa.job_data import EVAL_FRACTION, SPLIT_SEED
from squad_oracle import hf_evaluate
from tiny_bert import save_tiny_bert

TINY_T5 = ["--from-scratch", "--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "64", "--vocab-size", "400"]
WINDOWS = ["--max-seq-length", "96", "--doc-stride", "32"]
SAMPLES = ["--max-train-samples", "24", "--max-eval-samples", "12"]
SEED_FLAGS = [
    "--model",
    "--model-name-or-path",
    "--dataset-name",
    "--train-file",
    "--eval-file",
    "--context-column",
    "--question-column",
    "--answer-column",
    "--per-device-train-batch-size",
    "--learning-rate",
    "--num-train-epochs",
    "--max-seq-length",
    "--doc-stride",
    "--output-dir",
    "--max-answer-length",
    "--num-beams",
    "--head",
    "--null-score-diff-threshold",
]


def _printed_report(out: str) -> dict:
    """The official report printed last, checked against the line after it that sets F1 beside the F1 of
    answering nothing."""
    report, end = json.JSONDecoder().raw_decode(out, out.rindex('{\n  "exact"'))
    baseline = 100.0 * report["NoAns_total"] / report["total"]
    assert out[end:].strip().startswith(f"F1 {report['f1']:.2f} against {baseline:.2f} for answering nothing")
    return report


def _eval_examples(count: int) -> list:
    examples = load_squad_json(squad_sample(), for_training=False).examples
    return split_by_article(examples, eval_fraction=EVAL_FRACTION, seed=SPLIT_SEED)[1][:count]


def _check_outputs(directory, printed: dict, count: int) -> None:
    """The printed report is the official report (transformers' implementation of the official script) of
    the written files, and eval_results.json holds it: exact/f1 of predictions.json as it stands, best_* of
    answers.json under the best threshold over null_odds.json. Every non-empty prediction is its question's
    best answer."""
    predictions = json.loads((directory / "predictions.json").read_text())
    answers = json.loads((directory / "answers.json").read_text())
    null_odds = json.loads((directory / "null_odds.json").read_text())
    assert set(predictions) == set(null_odds) == set(answers) and len(predictions) == count
    assert all(abs(v) <= NULL_ODDS_CLIP for v in null_odds.values())
    assert all(answers[k] == v for k, v in predictions.items() if v)
    gold = {ex.id: ex.answers for ex in _eval_examples(count)}
    expected = hf_evaluate(gold, predictions, None)
    thresholded = hf_evaluate(gold, answers, null_odds, thresh=float("inf"))
    expected.update({k: v for k, v in thresholded.items() if k.startswith("best_")})
    assert printed == pytest.approx(expected)
    stored = json.loads((directory / "eval_results.json").read_text())
    assert {k: stored[k] for k in expected} == pytest.approx(expected)
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"} <= set(printed)


def test_seq2seq_train_then_eval(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["qa", "train", "--output-dir", str(run), "--max-steps", "4", "--no-progress", *TINY_T5, *WINDOWS, *SAMPLES]
    assert main(args) == 0
    _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    for name in ("metrics.jsonl", "loss.png", "run_config.yaml"):
        assert (run / name).is_file()
    checkpoint = run / "checkpoints" / "step-00000004"
    assert (checkpoint / "tokenizer.json").is_file() and (checkpoint / "model.safetensors").is_file()
    assert main(args) == 2  # the run dir holds checkpoints: --resume or another dir
    assert "--resume" in capsys.readouterr().err

    out = tmp_path / "eval"
    assert main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12", "--output-dir", str(out)]) == 0
    printed = _printed_report(capsys.readouterr().out)
    _check_outputs(out, printed, 12)
    assert json.loads((run / "predictions.json").read_text()) == json.loads((out / "predictions.json").read_text())

    assert main(["qa", "eval", "--model", str(run), "--head", "span", "--max-eval-samples", "2"]) == 2
    assert "--head span needs a BERT-family" in capsys.readouterr().err


def test_span_train_then_eval_and_head_mismatch(tmp_path, capsys):
    bert = save_tiny_bert(tmp_path / "bert")
    run = tmp_path / "span"
    args = [
        "qa",
        "train",
        "--head",
        "span",
        "--model",
        str(bert),
        "--output-dir",
        str(run),
        "--max-steps",
        "3",
        "--learning-rate",
        "1e-3",
        "--no-progress",
        "--dropout",
        "0",
        "--precision",
        "bf16",
        *WINDOWS,
        *SAMPLES,
    ]
    assert main(args) == 0
    assert "3 steps of 12 in bf16 autocast on cpu" in (printed := capsys.readouterr().out)
    _check_outputs(run, _printed_report(printed), 12)
    saved = json.loads(next(run.glob("checkpoints/step-*/config.json")).read_text())["posformer"]  # was 0.1
    assert (saved["dropout"], saved["attention_dropout"]) == (0.0, 0.0)
    trained = json.loads((run / "eval_results.json").read_text())  # trained in bf16, scored from float32 logits
    assert (trained["training_precision"], trained["logits_dtype"]) == ("bf16", "float32")
    assert main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12", "--precision", "bf16"]) == 0
    _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    evaluated = json.loads((run / "eval_results.json").read_text())
    assert (evaluated["head"], evaluated["precision"], evaluated["logits_dtype"]) == ("span", "bf16", "bfloat16")

    assert main(["qa", "eval", "--model", str(run), "--head", "seq2seq", "--max-eval-samples", "2"]) == 2
    assert "--head seq2seq needs an encoder-decoder checkpoint (T5, BERT2BERT)" in capsys.readouterr().err


def test_bert2bert_train_eval_and_convert(tmp_path, capsys):
    """--head seq2seq from a BERT dir warm-starts BERT2BERT; the run's checkpoint reloads in `qa eval`, and
    `convert --to-hf` writes an EncoderDecoderModel that transformers loads (same logits) and `qa eval` reads."""
    import torch
    from transformers import EncoderDecoderModel

    from posformer.checkpoints.native import load_pretrained

    bert = save_tiny_bert(tmp_path / "bert")
    run = tmp_path / "b2b"
    assert (
        main(
            [
                "qa",
                "train",
                "--head",
                "seq2seq",
                "--model",
                str(bert),
                "--output-dir",
                str(run),
                "--max-steps",
                "3",
                "--learning-rate",
                "1e-3",
                "--no-progress",
                *WINDOWS,
                *SAMPLES,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "(BERT2BERT)" in printed
    _check_outputs(run, _printed_report(printed), 12)
    checkpoint = run / "checkpoints" / "step-00000003"
    assert (checkpoint / "vocab.txt").is_file() and (checkpoint / "tokenizer.json").is_file()
    model = load_pretrained(checkpoint).eval()
    assert model.cfg.hf_model_type == "encoder-decoder" and model.cfg.separate_decoder_embeddings
    assert (model.cfg.decoder_start_token_id, model.cfg.eos_token_id, model.cfg.pad_token_id) == (101, 102, 0)
    out = tmp_path / "eval"
    assert main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12", "--output-dir", str(out)]) == 0
    _check_outputs(out, _printed_report(capsys.readouterr().out), 12)
    predictions = json.loads((run / "predictions.json").read_text())
    assert json.loads((out / "predictions.json").read_text()) == predictions

    hf_dir = tmp_path / "hf"
    assert main(["convert", "--to-hf", str(checkpoint), "--out", str(hf_dir)]) == 0
    assert "tokenizer files" in capsys.readouterr().out and (hf_dir / "vocab.txt").is_file()
    hf = EncoderDecoderModel.from_pretrained(hf_dir).eval()
    ids = torch.tensor([[101, 2054, 2003, 1996, 3007, 1029, 102]])
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, decoder_input_ids=ids[:, :4]).logits,
            hf(input_ids=ids, decoder_input_ids=ids[:, :4]).logits,
            rtol=0,
            atol=1e-4,
        )
    hf_eval = tmp_path / "hf-eval"
    assert (
        main(
            [
                "qa",
                "eval",
                "--model",
                str(hf_dir),
                "--max-eval-samples",
                "12",
                "--max-seq-length",
                "96",
                "--doc-stride",
                "32",
                "--output-dir",
                str(hf_eval),
            ]
        )
        == 0
    )
    _check_outputs(hf_eval, _printed_report(capsys.readouterr().out), 12)
    assert json.loads((hf_eval / "predictions.json").read_text()) == predictions


def test_seq2seq_without_model_warm_starts_the_default_checkpoint(tmp_path, monkeypatch, capsys):
    """No --model and no --from-scratch: BERT2BERT from `default_pretrained_model()` (here a tiny BERT)."""
    from posformer.tasks.qa import job as qa_job

    bert = save_tiny_bert(tmp_path / "bert")
    monkeypatch.setattr(qa_job, "default_pretrained_model", lambda: bert)
    run = tmp_path / "run"
    assert (
        main(
            [
                "qa",
                "train",
                "--output-dir",
                str(run),
                "--max-steps",
                "1",
                "--no-progress",
                *WINDOWS,
                "--max-train-samples",
                "4",
                "--max-eval-samples",
                "2",
            ]
        )
        == 0
    )
    assert f"seq2seq QA: {bert} (BERT2BERT)" in capsys.readouterr().out
    assert json.loads((run / "eval_results.json").read_text())["model"] == str(bert)


@pytest.mark.parametrize("command", ["train", "eval"])
def test_help_lists_the_seed_flags(command, capsys):
    with pytest.raises(SystemExit):
        main(["qa", command, "--help"])
    text = capsys.readouterr().out
    wanted = [
        f
        for f in SEED_FLAGS
        if command == "train"
        or f not in ("--train-file", "--per-device-train-batch-size", "--learning-rate", "--num-train-epochs")
    ]
    missing = [flag for flag in wanted if flag not in text]
    assert not missing
    if command == "train":
        words = " ".join(text.split())
        assert "CPU-friendly defaults for the from-scratch seq2seq model" in words
        assert "batch 12" in words and "--from-scratch" in text


def test_bad_inputs_fail_clearly(tmp_path, capsys):
    out = ["--output-dir", str(tmp_path / "run"), *TINY_T5, "--max-steps", "1"]
    assert main(["qa", "train", "--train-file", str(tmp_path / "missing.json"), *out]) == 2
    assert "missing.json" in capsys.readouterr().err
    records = tmp_path / "rows.jsonl"
    records.write_text(
        json.dumps({"id": "a", "passage": "x y", "question": "q?", "answers": {"text": [], "answer_start": []}})
    )
    assert main(["qa", "train", "--train-file", str(records), *out]) == 2
    assert "context" in capsys.readouterr().err
    assert main(["qa", "train", "--eval-file", str(squad_sample()), *out]) == 2
    assert "--train-file" in capsys.readouterr().err
    assert main(["qa", "eval", "--model", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["qa", "train", "--doc-stride", "200", "--max-seq-length", "100", *out]) == 2
    assert "--doc-stride" in capsys.readouterr().err
    assert main(["qa", "train", "--doc-stride", "0", *out]) == 2
    assert "--doc-stride=0 is invalid: expected a positive integer" in capsys.readouterr().err
    assert main(["qa", "train", "--learning-rate", "-1", *out]) == 2
    assert "--learning-rate=-1.0 is invalid: expected a number > 0" in capsys.readouterr().err
    assert main(["qa", "train", *out, "--d-model", "30", "--heads", "4"]) == 2
    assert "--d-model=30 is invalid: expected a multiple of --heads (4)" in capsys.readouterr().err
    assert main(["qa", "train", *out, "--model", str(tmp_path)]) == 2
    assert (
        "--from-scratch=True is invalid: expected only with --head seq2seq and without --model"
        in capsys.readouterr().err
    )
    assert main(["qa", "train", *out, "--head", "span"]) == 2
    assert "--from-scratch=True is invalid" in capsys.readouterr().err


def test_null_window_sampling_and_threshold_calibration(tmp_path, capsys):
    """--keep-null-windows trains on fewer windows; --calibration-fraction sets the threshold on held-out
    training articles, and the predictions, eval_results.json and run_config.yaml (read by `qa eval`) use it."""
    import yaml

    bert = save_tiny_bert(tmp_path / "bert")
    common = [
        "qa",
        "train",
        "--head",
        "span",
        "--model",
        str(bert),
        "--max-steps",
        "3",
        "--learning-rate",
        "1e-3",
        "--no-progress",
        *WINDOWS,
        "--max-train-samples",
        "400",
        "--max-eval-samples",
        "12",
    ]
    assert main([*common, "--output-dir", str(tmp_path / "all")]) == 0
    windows_all = int(capsys.readouterr().out.split(" windows)")[0].rsplit("(", 1)[1])
    run = tmp_path / "run"
    assert (
        main([*common, "--output-dir", str(run), "--keep-null-windows", "0.3", "--calibration-fraction", "0.25"]) == 0
    )
    out = capsys.readouterr().out
    windows = int(out.split(" windows)")[0].rsplit("(", 1)[1])
    assert 0 < windows < windows_all
    assert "null threshold calibrated on" in out
    threshold = yaml.safe_load((run / "run_config.yaml").read_text())["qa"]["null_score_diff_threshold"]
    assert json.loads((run / "eval_results.json").read_text())["null_score_diff_threshold"] == threshold
    predictions = json.loads((run / "predictions.json").read_text())
    answers = json.loads((run / "answers.json").read_text())
    odds = json.loads((run / "null_odds.json").read_text())
    assert predictions == {q: answers[q] if odds[q] <= threshold else "" for q in predictions}  # run_qa.py's rule
    assert (
        main(["qa", "eval", "--model", str(run), "--max-eval-samples", "12", "--output-dir", str(tmp_path / "e")]) == 0
    )
    assert json.loads((tmp_path / "e" / "eval_results.json").read_text())["null_score_diff_threshold"] == threshold
    capsys.readouterr()
    for flag, value, expected in (
        ("--keep-null-windows", "0", "--keep-null-windows=0.0 is invalid"),
        ("--calibration-fraction", "1", "--calibration-fraction=1.0 is invalid"),
    ):
        assert main([*common, "--output-dir", str(tmp_path / "bad"), flag, value]) == 2
        assert expected in capsys.readouterr().err
