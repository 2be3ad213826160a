"""`posformer train` on your own documents: a .jsonl file trains end to end (the EOD id between documents, the model's
eos_token_id), gives the losses of the same documents as a directory of text files, and `--resume` continues it
exactly; `data.train` errors name the field."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from posformer.cli import main
from posformer.data.text import default_corpus, read_text
from posformer.train.settings import load_run_settings
from train_helpers import CORPUS_CHARS, losses, tiny_run, write_config


def paragraphs() -> list[str]:
    return [p for p in read_text(default_corpus())[:CORPUS_CHARS].split("\n\n") if p.strip()]


def write_jsonl(path: Path) -> Path:
    path.write_text("".join(json.dumps({"title": str(i), "body": p}) + "\n" for i, p in enumerate(paragraphs())))
    return path


def write_directory(root: Path) -> Path:
    root.mkdir()
    for i, text in enumerate(paragraphs()):
        (root / f"{i:04d}.txt").write_text(text)
    return root


def train(root: Path, name: str, data: list[Path], steps: int, *extra: str) -> Path:
    config = tiny_run(data[0], steps, dropout=0.0, eval_every=2)
    config["data"] |= {"train": [str(p) for p in data], "text_field": "body"}
    path = write_config(root / f"{name}.yaml", config)
    run = root / name
    assert main(["train", "--config", str(path), "--output-dir", str(run), "--no-progress", *extra]) == 0
    return run


def test_train_on_a_jsonl_file_matches_a_directory_of_the_same_documents(tmp_path: Path) -> None:
    jsonl = train(tmp_path, "jsonl", [write_jsonl(tmp_path / "docs.jsonl")], steps=4)
    directory = train(tmp_path, "dir", [write_directory(tmp_path / "docs")], steps=4)
    assert [s for s, _ in losses(jsonl)] == [1, 2, 3, 4] and losses(jsonl) == losses(directory)
    checkpoint = jsonl / "checkpoints" / "step-00000004"
    config = json.loads((checkpoint / "config.json").read_text())["posformer"]
    chars = sorted(set("".join(paragraphs())))
    assert config["vocab_size"] == len(chars) + 1 and config["eos_token_id"] == len(chars)
    hf = AutoTokenizer.from_pretrained(checkpoint)
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == len(chars)
    recorded = yaml.safe_load((jsonl / "run_config.yaml").read_text())["data"]
    assert recorded["text_field"] == "body"


def test_resume_on_jsonl_data_gives_the_uninterrupted_losses(tmp_path: Path) -> None:
    data = [write_jsonl(tmp_path / "docs.jsonl")]
    whole = train(tmp_path, "whole", data, steps=4)
    run = train(tmp_path, "part", data, steps=2)
    assert losses(run) == losses(whole)[:2]
    resumed = ["--set", "trainer.steps=4", "--resume"]
    assert (
        main(["train", "--config", str(tmp_path / "part.yaml"), "--output-dir", str(run), "--no-progress", *resumed])
        == 0
    )
    assert losses(run) == losses(whole)


def test_packed_documents_train_resume_exactly_and_evaluate_each_document_alone(tmp_path: Path) -> None:
    """data.pack_documents: batches carry document_ids, `--resume` continues exactly, and the evaluation's loss is
    the mean over each held-out document's own predictions, as if each were scored alone."""
    import torch

    from posformer.data.packing import pack_documents
    from posformer.loading import load_model, load_text_tokenizer
    from posformer.tasks.causal_lm import perplexity_evaluator
    from posformer.train.batches import packed_batch

    data = [write_jsonl(tmp_path / "docs.jsonl")]
    packed = ["--set", "data.pack_documents=true"]
    whole = train(tmp_path, "whole", data, 4, *packed)
    run = train(tmp_path, "part", data, 2, *packed)
    resumed = ["--set", "trainer.steps=4", "--resume", *packed]
    args = ["train", "--config", str(tmp_path / "part.yaml"), "--output-dir", str(run), "--no-progress", *resumed]
    assert main(args) == 0 and losses(run) == losses(whole) and len(losses(whole)) == 4
    model, tokenizer = load_model(whole), load_text_tokenizer(whole)
    docs = [torch.tensor(tokenizer.encode(p) + [tokenizer.eod_id]) for p in paragraphs()[:12]]
    rows = pack_documents(docs, 32)
    with torch.no_grad():
        evaluated = perplexity_evaluator([packed_batch(rows, torch.arange(len(rows.input_ids)))])(model)
        pieces = [d[i : i + 32] for d in docs for i in range(0, len(d), 32)]
        total = sum(float(model(p[None], labels=p[None]).loss) * (len(p) - 1) for p in pieces if len(p) > 1)
        count = sum(len(p) - 1 for p in pieces)
    assert evaluated["val_loss"] == pytest.approx(total / count, rel=1e-5)


def test_data_paths_are_checked_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match=r"^data.valid: .*missing.jsonl does not exist"):
        load_run_settings(None, [f"data.valid=[{tmp_path / 'missing.jsonl'}]"])
    with pytest.raises(ValueError, match=r"^data.text_field='' is invalid"):
        load_run_settings(None, ["data.text_field=''"])
    settings = load_run_settings(None, [f"data.train=[{tmp_path}]"])  # a directory is a source
    assert settings.data.train == [str(tmp_path)]
    parquet = tmp_path / "docs.parquet"
    parquet.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"^data.train: .*docs.parquet: .*needs the `datasets` package: pip install"):
        load_run_settings(None, [f"data.train=[{parquet}]"])
