"""The public load/save API (`posformer.load`, `Transformer.save_pretrained` / `from_pretrained`, `.config`): a
model saved with its tokenizer comes back with the same logits and the same ids, from its directory, from a
training run's directory and from a Hugging Face directory."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.cli import main
from tests.conftest import tiny
from tiny_bert import save_tiny_bert
from train_helpers import tiny_run, write_config, write_corpus


def test_save_pretrained_with_a_tokenizer_loads_back_the_same_model_and_ids(tmp_path) -> None:
    source = save_tiny_bert(tmp_path / "bert")
    tokenizer = pf.load_tokenizer(source)
    model = pf.Transformer(tiny("decoder", vocab_size=len(tokenizer))).eval()
    assert model.config is model.cfg
    written = model.save_pretrained(tmp_path / "mine", tokenizer=tokenizer)
    ids = torch.tensor([tokenizer("a position encoding")["input_ids"]])
    for loaded in (pf.load(written), pf.Transformer.from_pretrained(written)):
        assert not loaded.training and loaded.config == model.config
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert pf.load_tokenizer(written)("a position encoding")["input_ids"] == ids[0].tolist()


def test_posformers_own_tokenizer_is_saved_beside_the_model(tmp_path) -> None:
    from transformers import AutoTokenizer

    from posformer.data.text import ByteTokenizer

    model = pf.Transformer(tiny("decoder", vocab_size=256))
    written = model.save_pretrained(tmp_path / "bytes", tokenizer=ByteTokenizer())
    assert AutoTokenizer.from_pretrained(written)("héllo")["input_ids"] == list("héllo".encode())


def test_a_tokenizer_without_save_pretrained_is_refused_by_name(tmp_path) -> None:
    model = pf.Transformer(tiny("decoder"))
    with pytest.raises(TypeError, match=r"save_pretrained: tokenizer is a str; expected an object with"):
        model.save_pretrained(tmp_path, tokenizer="bert-base-uncased")
    assert not (tmp_path / "config.json").exists()


def test_load_reads_a_training_run_and_a_hugging_face_directory(tmp_path) -> None:
    config = write_config(tmp_path / "run.yaml", tiny_run(write_corpus(tmp_path / "corpus.txt"), steps=10))
    assert main(["train", "--config", str(config), "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 0
    newest = sorted((tmp_path / "run" / "checkpoints").iterdir())[-1]
    ids = torch.tensor([[1, 2, 3, 4]])
    torch.testing.assert_close(pf.load(tmp_path / "run")(ids).logits, pf.load(newest)(ids).logits, rtol=0, atol=0)
    assert (
        pf.load_tokenizer(tmp_path / "run")("ROMEO:")["input_ids"] == pf.load_tokenizer(newest)("ROMEO:")["input_ids"]
    )
    bert = pf.load(save_tiny_bert(tmp_path / "bert"))
    assert bert.config.arch == "encoder" and bert.config.hf_model_type == "bert"


def test_convert_exports_a_trained_run_that_transformers_loads_and_decodes_alike(tmp_path, capsys) -> None:
    """convert --to-hf of a run dir (no hf_model_type: the family is inferred) gives a checkpoint and a char
    tokenizer that AutoModelForCausalLM and AutoTokenizer load, greedy-decoding the same text as posformer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = write_config(tmp_path / "run.yaml", tiny_run(write_corpus(tmp_path / "corpus.txt"), steps=10))
    assert main(["train", "--config", str(config), "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 0
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    assert "tokenizer.json" in capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    prompt = tokenizer("ROMEO:", return_tensors="pt")["input_ids"]
    said = theirs.generate(prompt, max_new_tokens=12, do_sample=False, attention_mask=torch.ones_like(prompt))
    ours = pf.load(tmp_path / "run").generate(prompt, max_new_tokens=12)
    assert torch.equal(said, ours)
    capsys.readouterr()
    args = ["generate", "--model", str(tmp_path / "run"), "--prompt", "ROMEO:", "--max-new-tokens", "12"]
    assert main([*args, "--temperature", "0"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == tokenizer.decode(said[0])
