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


def test_the_job_builds_its_model_once_with_dropout_set_and_every_stored_tensor_kept(tmp_path):
    import torch

    from posformer.tasks.qa.models import fine_tuning_changes, load_qa_model

    saved = pf.Transformer(tiny("encoder", head="span_qa", dropout=0.1, attention_dropout=0.1))
    saved.save_pretrained(tmp_path / "span")
    built = []
    original_init = pf.Transformer.__init__

    def counting_init(self, cfg, *args, **kwargs):
        original_init(self, cfg, *args, **kwargs)
        if next(self.parameters()).device.type != "meta":  # shapes-only models hold no weights
            built.append(cfg)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pf.Transformer, "__init__", counting_init)
        patch.setattr("posformer.hf.load_tokenizer", lambda directory: None)
        model, _, head, _ = load_qa_model(tmp_path / "span", None, changes=fine_tuning_changes(0.0, None))
    assert head == "span" and len(built) == 1  # one model with weights; nothing rebuilt after loading
    assert (model.cfg.dropout, model.cfg.attention_dropout, model.cfg.activation_dropout) == (0, 0, 0)
    assert all(m.p == 0.0 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), saved.state_dict().items()):
        assert torch.equal(ours, theirs), name
    ids = torch.randint(0, 61, (2, 9))
    torch.testing.assert_close(model.train()(ids).start_logits, saved.eval()(ids).start_logits)  # p=0: eval's


def test_a_new_encoder_span_head_starts_fresh_and_every_stored_tensor_is_kept(tmp_path):
    import torch

    from posformer.tasks.qa.models import fine_tuning_changes, load_qa_model

    saved = pf.Transformer(tiny("encoder_decoder", head="seq2seq_lm"))
    saved.save_pretrained(tmp_path / "s2s")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("posformer.hf.load_tokenizer", lambda directory: None)
        model, _, _, _ = load_qa_model(tmp_path / "s2s", "seq2seq", changes=fine_tuning_changes(None, 1.0))
    assert model.cfg.encoder_span_loss == 1.0
    stored = saved.state_dict()
    new = sorted(set(model.state_dict()) - set(stored))
    assert new and all(name.startswith("encoder_span.") for name in new)
    for name, tensor in stored.items():
        assert torch.equal(model.state_dict()[name], tensor), name


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
