"""The training job, checkpoints and the command line, end to end on tiny settings."""

from __future__ import annotations

import json

import pytest
import torch

import posformer as pf
from posformer.checkpoints.native import load_pretrained, save_pretrained
from posformer.cli import main
from posformer.data.text import CharTokenizer, default_corpus, read_text


def test_checkpoint_round_trip_keeps_logits_and_ties(tmp_path) -> None:
    cfg = pf.Config(
        arch="encoder_decoder",
        vocab_size=40,
        d_model=16,
        n_layers=1,
        n_heads=2,
        decoder_start_token_id=0,
        position="rope",
    )
    model = pf.Transformer(cfg).eval()
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path).eval()
    assert loaded.head.proj.weight is loaded.embed_tokens.weight
    src, tgt = torch.randint(0, 40, (2, 5)), torch.randint(0, 40, (2, 3))
    torch.testing.assert_close(model(src, decoder_input_ids=tgt).logits, loaded(src, decoder_input_ids=tgt).logits)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".saving")]


def test_load_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path)


def test_shipped_corpus_and_char_tokenizer_round_trip(tmp_path) -> None:
    text = read_text(default_corpus())
    assert text.startswith("First Citizen:") and len(text) == 300_000
    tokenizer = CharTokenizer.from_text(text)
    assert tokenizer.decode(tokenizer.encode(text[:500])) == text[:500]
    tokenizer.save_pretrained(tmp_path / "tok")
    assert CharTokenizer.load(tmp_path / "tok").chars == tokenizer.chars
    with pytest.raises(ValueError, match="not in the tokenizer"):
        tokenizer.encode("€")


TINY = [
    "--set",
    "trainer.steps=40",
    "--set",
    "trainer.eval_every=20",
    "--set",
    "trainer.batch_size=8",
    "--set",
    "data.seq_len=32",
    "--set",
    "model.d_model=32",
    "--set",
    "model.n_layers=1",
    "--set",
    "model.n_heads=2",
    "--set",
    "model.d_ff=64",
    "--set",
    "trainer.sample_tokens=20",
    "--set",
    "trainer.lr=1e-2",
    "--set",
    "trainer.warmup=5",
    "--no-progress",
]


def test_train_command_lowers_the_loss_and_saves(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--output-dir", str(out), *TINY]) == 0
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "eval" in r]
    assert [r["step"] for r in evals] == [20, 40] and evals[-1]["eval"]["val_loss"] < evals[0]["eval"]["val_loss"]
    assert (out / "loss.png").stat().st_size > 0 and (out / "run_config.yaml").is_file()
    assert "sample after 40 steps" in capsys.readouterr().out
    assert main(["generate", "--model", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_cli_reports_bad_input_clearly(tmp_path, capsys) -> None:
    assert main(["train", "--set", f"data.train={tmp_path / 'missing.txt'}"]) == 2
    assert "missing.txt" in capsys.readouterr().err
    assert main(["train", "--set", "model.position=nonsense", "--output-dir", str(tmp_path), *TINY]) == 2
    assert "Config.position='nonsense'" in capsys.readouterr().err
    assert main(["train", "--set", "trainer.lr=-1", "--output-dir", str(tmp_path)]) == 2
    assert "trainer.lr=-1 is invalid" in capsys.readouterr().err
    assert main(["train", "--set", "lr=1", "--output-dir", str(tmp_path)]) == 2
    assert "SECTION.KEY=VALUE" in capsys.readouterr().err


def test_info_command(capsys) -> None:
    assert main(["info", "--preset", "gpt2"]) == 0
    assert "124,439,808" in capsys.readouterr().out


def test_info_reads_the_config_of_a_model_dir_and_a_hugging_face_dir(tmp_path, capsys) -> None:
    from tiny_bert import save_tiny_bert

    model = pf.Transformer(pf.Config.preset("llama", vocab_size=97, d_model=32, n_layers=2, n_heads=4, d_ff=64))
    model.save_pretrained(tmp_path / "mine")
    bert = save_tiny_bert(tmp_path / "bert")
    for path, total in ((tmp_path / "mine", model.num_parameters()), (bert, pf.load(bert).num_parameters())):
        capsys.readouterr()
        assert main(["info", str(path)]) == 0
        printed = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("total")]
        assert printed == [["total", f"{total:,}"]]
    assert main(["info", str(tmp_path / "missing")]) == 2
    assert "missing does not exist" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "mine"), "--preset", "gpt2"]) == 2
    assert "give exactly one of MODEL, --preset NAME or --config FILE" in capsys.readouterr().err


def test_every_command_has_help(capsys) -> None:
    for command in (["--help"], ["info", "--help"], ["train", "--help"], ["generate", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(command)
        assert exit_info.value.code == 0
    assert "--resume" in capsys.readouterr().out
