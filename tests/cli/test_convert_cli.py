"""`posformer convert SOURCE --to hf|posformer --out DIR`, and the older `--from-hf SOURCE` / `--to-hf SOURCE`
spelling, which still works: both directions, checked against transformers (the round trip loads in
`LlamaForCausalLM` with the logits of the Hugging Face model it started from), and the same files either way."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf
from hf_oracle import assert_same_outputs, padded_batch
from posformer.cli import main

SIZES = dict(
    vocab_size=61,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("hf")
    LlamaForCausalLM(LlamaConfig(**SIZES, attn_implementation="eager")).eval().save_pretrained(directory)
    return directory


@pytest.mark.parametrize(
    "spelling",
    [
        lambda source, kind, out: ["convert", str(source), "--to", kind, "--out", str(out)],
        lambda source, kind, out: ["convert", "--to", kind, "--out", str(out), str(source)],
        lambda source, kind, out: [
            "convert",
            f"--{'to-hf' if kind == 'hf' else 'from-hf'}",
            str(source),
            "--out",
            str(out),
        ],
    ],
    ids=["SOURCE --to KIND", "--to KIND ... SOURCE", "older --to-hf / --from-hf"],
)
def test_convert_both_ways_gives_transformers_its_own_logits(tmp_path, hf_dir, spelling) -> None:
    ours, back = tmp_path / "ours", tmp_path / "back"
    assert main(spelling(hf_dir, "posformer", ours)) == 0
    assert main(spelling(ours, "hf", back)) == 0
    reloaded = LlamaForCausalLM.from_pretrained(back, attn_implementation="eager").eval()
    original = LlamaForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    assert_same_outputs(pf.from_hf(back), original, padded_batch(61))
    assert_same_outputs(pf.from_hf(hf_dir), reloaded, padded_batch(61))


def test_both_spellings_write_the_same_files(tmp_path, hf_dir) -> None:
    assert main(["convert", str(hf_dir), "--to", "posformer", "--out", str(tmp_path / "new")]) == 0
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "old")]) == 0
    new, old = tmp_path / "new" / "model.safetensors", tmp_path / "old" / "model.safetensors"
    assert new.read_bytes() == old.read_bytes()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["convert", "x", "--out", "o"], "convert x: give --to hf (posformer -> Hugging Face) or --to posformer"),
        (["convert", "--to", "hf", "--out", "o"], "--to hf: give the SOURCE to convert before it"),
        (["convert", "x", "--to", "hf", "--to-hf", "y", "--out", "o"], "not both"),
        (["convert", "--to-hf", "x", "--from-hf", "y", "--out", "o"], "exactly one of --from-hf SOURCE or --to-hf"),
        (["convert", "x", "--to", "posformer", "--hf-model-type", "llama", "--out", "o"], "applies to --to hf only"),
    ],
)
def test_a_conversion_not_given_whole_is_refused_naming_the_flags(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_kind_is_refused_while_parsing(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["convert", "x", "--to", "onnx", "--out", "o"])
    assert "invalid choice: 'onnx'" in capsys.readouterr().err
