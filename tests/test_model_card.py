"""A saved model describes itself: `save_pretrained` and `to_hf` (and so `convert`) write a README.md with the
config, the encoding, the training run's data, steps and final metrics (as the Trainer logged them), and loading
code that works; and a model whose tokenizer has no BOS token exports no bos_token_id (transformers' LlamaConfig
would read a missing key as 1, so the export says null)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig

import posformer as pf
from bpe_run import STEPS, bpe_and_run
from conftest import tiny
from posformer.cli import main
from posformer.config.model_card import model_card
from posformer.train.run_record import training_run
from train_helpers import records


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory) -> tuple[Path, Path]:
    return bpe_and_run(tmp_path_factory.mktemp("bpe-run"))


def python_block(card: str) -> str:
    return re.search(r"```python\n(.*?)```", card, re.S).group(1)


def run_loading_code(card: str, cwd: Path) -> dict:
    """Run the card's loading code from the folder holding the model dir; its variables."""
    here = os.getcwd()
    os.chdir(cwd)
    try:
        scope: dict = {}
        exec(python_block(card), scope)
        return scope
    finally:
        os.chdir(here)


def test_a_run_trained_with_a_bpe_without_bos_has_and_exports_no_bos_token_id(bpe_run, tmp_path) -> None:
    bpe, run = bpe_run
    model = pf.load(run)
    assert pf.load_tokenizer(bpe).bos_token is None and pf.Config.preset("llama").bos_token_id == 1
    assert (model.config.bos_token_id, model.config.eos_token_id) == (None, 0)  # eos: the EOD token, id 0
    assert main(["convert", "--to-hf", str(run), "--out", str(tmp_path / "export")]) == 0
    assert json.loads((tmp_path / "export" / "config.json").read_text())["bos_token_id"] is None
    assert AutoConfig.from_pretrained(tmp_path / "export").bos_token_id is None


def test_convert_leaves_out_the_bos_token_id_of_an_older_run_that_its_tokenizer_lacks(bpe_run, tmp_path) -> None:
    bpe, run = bpe_run
    older = tmp_path / "older"
    pf.load(run).save_pretrained(older, tokenizer=pf.load_tokenizer(bpe))
    config = json.loads((older / "config.json").read_text())
    config["posformer"]["bos_token_id"] = 1  # the llama preset's, as runs kept it before: "!" of this BPE
    (older / "config.json").write_text(json.dumps(config))
    assert pf.load_tokenizer(bpe).convert_ids_to_tokens(1) == "!"
    assert main(["convert", "--to-hf", str(older), "--out", str(tmp_path / "export")]) == 0
    assert AutoConfig.from_pretrained(tmp_path / "export").bos_token_id is None
    config["posformer"]["bos_token_id"] = 0  # a special token of the tokenizer (its EOD): kept, as Qwen2's is
    (older / "config.json").write_text(json.dumps(config))
    assert main(["convert", "--to-hf", str(older), "--out", str(tmp_path / "kept")]) == 0
    assert AutoConfig.from_pretrained(tmp_path / "kept").bos_token_id == 0


def test_the_export_of_a_run_says_its_data_steps_and_final_metrics_and_loads_as_it_says(bpe_run, tmp_path) -> None:
    bpe, run = bpe_run
    assert main(["convert", "--to-hf", str(run), "--out", str(tmp_path / "export")]) == 0
    card = (tmp_path / "export" / "README.md").read_text()
    logged = records(run)
    final_eval = [r for r in logged if "eval" in r][-1]
    final_loss = [r["loss"] for r in logged if "loss" in r][-1]
    assert final_eval["step"] == STEPS
    assert f"| steps | {STEPS} of {STEPS} |" in card
    assert f"val_loss={final_eval['eval']['val_loss']:.6g}" in card and f"(evaluated at step {STEPS})" in card
    assert f"| final training loss | {final_loss:.6g} |" in card
    assert f"| data: tokenizer | {bpe} |" in card and "| data: pack_documents | True |" in card
    assert "| position encoding | rope (theta=10000," in card and "library_name: transformers" in card
    scope = run_loading_code(card, tmp_path)  # LlamaForCausalLM and AutoTokenizer, by the card's code
    ids = scope["tokenizer"]("ROMEO: light", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(scope["model"](ids).logits, pf.load(run)(ids).logits, rtol=1e-4, atol=1e-4)


def test_save_pretrained_writes_a_card_with_the_config_and_code_that_loads_it(bpe_run, tmp_path) -> None:
    bpe, run = bpe_run
    model = pf.load(run)
    saved = model.save_pretrained(tmp_path / "saved", tokenizer=pf.load_tokenizer(bpe), run=training_run(run))
    card = (saved / "README.md").read_text()
    config = json.loads(re.search(r"```json\n(.*?)```", card, re.S).group(1))
    assert config == json.loads((saved / "config.json").read_text())["posformer"]
    assert f"| parameters | {model.num_parameters():,} |" in card and f"| steps | {STEPS} of {STEPS} |" in card
    scope = run_loading_code(card, tmp_path)
    ids = scope["tokenizer"]("ROMEO: light", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(scope["model"](ids).logits, model(ids).logits, rtol=0, atol=0)
    bare = pf.Transformer(tiny()).save_pretrained(tmp_path / "bare")
    card = (bare / "README.md").read_text()
    assert "## Training" not in card and "No tokenizer was saved with the model" in card


def test_training_run_reads_the_step_of_the_checkpoint_and_what_was_logged_up_to_it(bpe_run) -> None:
    _, run = bpe_run
    first = sorted((run / "checkpoints").iterdir())[0]
    record = training_run(first)
    logged = records(run)
    assert record.step == 2 and record.steps == STEPS and record.metrics_step == 2
    assert record.metrics == [r["eval"] for r in logged if "eval" in r and r["step"] == 2][0]
    assert record.train_loss == [r["loss"] for r in logged if r.get("step") == 2 and "loss" in r][-1]
    assert training_run(run).step == STEPS  # a run dir stands for its newest checkpoint
    assert training_run(run.parent) is None and training_run(run / "checkpoints") is None


@pytest.mark.parametrize("writer", ["save_pretrained", "to_hf"])
def test_a_card_never_writes_through_a_planted_link(tmp_path, writer) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").symlink_to(outside)
    model = pf.Transformer(pf.Config.preset("llama", vocab_size=61, d_model=32, n_layers=1, n_heads=4, d_ff=48))
    model.save_pretrained(out) if writer == "save_pretrained" else pf.to_hf(model, out, hf_model_type="llama")
    assert outside.read_text() == "keep me"
    assert not (out / "README.md").is_symlink() and "# out" in (out / "README.md").read_text()


def test_the_encoding_line_names_the_layers_whose_settings_differ() -> None:
    cfg = tiny(
        position="rope",
        n_layers=3,
        layer_types=["local", "local", "full_attention"],
        layer_settings={"local": {"sliding_window": 8}},
    )
    card = model_card(cfg, "m")
    assert "| position encoding | rope (theta=10000, " in card and "; 2 `local` layers: sliding_window=8 |" in card
