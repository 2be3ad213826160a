"""`posformer.tasks.qa.job`: prediction options from the training run, the head a model answers with."""

from __future__ import annotations

import pytest
import yaml

import posformer as pf
from posformer.tasks.qa.job import prediction_options, print_report
from posformer.tasks.qa.models import model_head
from posformer.tasks.qa.options import PREDICTION_OPTIONS, PRETRAINED_DEFAULTS, QAJobOptions
from tests.conftest import tiny

STORED = dict(
    max_seq_length=96,
    doc_stride=24,
    max_answer_length=12,
    num_beams=3,
    null_score_diff_threshold=-1.5,
    n_best_size=7,
    null_score="both",
)


def test_unset_prediction_options_take_the_training_runs(tmp_path):
    (tmp_path / "run_config.yaml").write_text(yaml.safe_dump({"qa": {**STORED, "head": "span", "seed": 1}}))
    checkpoint = tmp_path / "checkpoints" / "step-00000004"
    checkpoint.mkdir(parents=True)
    for directory in (tmp_path, checkpoint):
        resolved = prediction_options(QAJobOptions(num_beams=2), directory, "seq2seq")
        assert {k: getattr(resolved, k) for k in PREDICTION_OPTIONS} == {**STORED, "num_beams": 2}
        assert resolved.head == "seq2seq" and resolved.seed == 42  # only prediction options come from the run


def test_without_a_run_the_pretrained_defaults_apply(tmp_path):
    resolved = prediction_options(QAJobOptions(), tmp_path, "span")
    assert {k: getattr(resolved, k) for k in PREDICTION_OPTIONS} == {
        k: PRETRAINED_DEFAULTS[k] for k in PREDICTION_OPTIONS
    }
    assert (resolved.max_seq_length, resolved.doc_stride, resolved.max_answer_length) == (384, 128, 30)
    with pytest.raises(ValueError, match=r"^--n-best-size=0 is invalid: expected a positive integer$"):
        prediction_options(QAJobOptions(n_best_size=0), tmp_path, "span")


def test_model_head_is_the_models_own_qa_head(tmp_path):
    assert model_head(pf.Transformer(tiny("encoder", head="span_qa")), tmp_path) == "span"
    assert model_head(pf.Transformer(tiny("encoder_decoder")), tmp_path) == "seq2seq"
    with pytest.raises(
        ValueError,
        match=r"is not a question-answering model \(arch decoder, head 'causal_lm'\): "
        r"expected a `qa train` run or checkpoint, or a model with a 'seq2seq_lm' "
        r"or 'span_qa' head$",
    ):
        model_head(pf.Transformer(tiny("decoder")), tmp_path)


def test_with_dropout_keeps_the_weights_and_sets_every_probability():
    import torch

    from posformer.tasks.qa.models import with_dropout

    model = pf.Transformer(tiny("encoder", head="span_qa", dropout=0.1, attention_dropout=0.1)).train()
    plain = with_dropout(model, 0.0)
    assert plain.training and (plain.cfg.dropout, plain.cfg.attention_dropout, plain.cfg.activation_dropout) == (
        0,
        0,
        0,
    )
    assert all(m.p == 0.0 for m in plain.modules() if isinstance(m, torch.nn.Dropout))
    for (name, ours), (_, theirs) in zip(plain.state_dict().items(), model.state_dict().items()):
        assert torch.equal(ours, theirs), name
    ids = torch.randint(0, 61, (2, 9))
    torch.testing.assert_close(plain(ids).start_logits, model.eval()(ids).start_logits)  # train mode, p=0: eval's
    assert torch.equal(plain(ids).start_logits, plain(ids).start_logits)


def test_a_dropout_outside_0_to_1_is_refused():
    from posformer.tasks.qa.job import train_qa

    with pytest.raises(ValueError, match="--dropout"):
        train_qa(QAJobOptions(head="span", dropout=1.0, output_dir="unused"))


def test_the_report_ends_with_f1_beside_answering_nothing() -> None:
    """Three of eight questions unanswerable: answering nothing scores 37.5."""
    lines: list[str] = []
    print_report(
        {
            "exact": 40.0,
            "f1": 45.5,
            "total": 8,
            "HasAns_f1": 30.0,
            "HasAns_total": 5,
            "NoAns_f1": 71.25,
            "NoAns_total": 3,
        },
        lines.append,
    )
    assert lines[-1] == (
        "F1 45.50 against 37.50 for answering nothing (3 of 8 questions have no answer); "
        "HasAns F1 30.00, NoAns F1 71.25"
    )
