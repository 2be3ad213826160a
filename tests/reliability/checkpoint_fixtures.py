"""Tiny checkpoints of every kind, ways to damage them, and the CLI seen as (exit status, stdout, stderr).

Imported by name (pytest puts this folder on sys.path): the model-directory, integrity and resume tests share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import posformer as pf
from posformer.checkpoints.native import save_pretrained
from posformer.cli import main

LLAMA = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
CHARS = list("abcdefghijklmnopqrstuvwxyz \n")
PROMPT = "the cat"


def save_tokenizer(directory: Path):
    """A byte-level BPE tokenizer trained on two sentences, saved as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        ["the cat sat on the mat", "a dog ran in the park"] * 5,
        trainers.BpeTrainer(vocab_size=60, special_tokens=["<pad>", "<s>", "</s>"]),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    return fast


def save_hf_llama(directory: Path, **save) -> Path:
    """A random tiny LlamaForCausalLM with a BPE tokenizer (`save`: `save_pretrained` options, e.g. sharding)."""
    torch.manual_seed(0)
    save_tokenizer(directory)
    LlamaForCausalLM(LlamaConfig(**LLAMA)).save_pretrained(directory, **save)
    return directory


def save_posformer(directory: Path) -> Path:
    """A posformer checkpoint (a llama-family model, so `convert --to-hf` works) with a character tokenizer."""
    torch.manual_seed(0)
    cfg = pf.Config.preset(
        "llama", vocab_size=len(CHARS), d_model=16, n_layers=1, n_heads=2, d_ff=32, hf_model_type="llama"
    )
    tokenizer = json.dumps({"type": "char", "chars": CHARS})
    return save_pretrained(pf.Transformer(cfg), directory, {"tokenizer.json": tokenizer})


def copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def rewrite_manifest(checkpoint: Path) -> None:
    """Make manifest.json match the files as they are now: a tampering that the checksums cannot see."""
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    for name in manifest["files"]:
        data = (checkpoint / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def cli(*argv: str) -> tuple[int, str, str]:
    """`posformer ARGV` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def refused(*argv: str) -> str:
    """Run `posformer ARGV`, which must fail cleanly (status 2, `posformer CMD: error: ...`); its stderr."""
    status, _, err = cli(*argv)
    assert status == 2 and "Traceback" not in err and f"posformer {argv[0]}: error: " in err, err
    return err


def generate(model: Path) -> list[str]:
    return ["generate", "--model", str(model), "--prompt", PROMPT, "--max-new-tokens", "2", "--temperature", "0"]


def train_tiny_run(root: Path) -> tuple[dict, Path]:
    """(run config, run dir) of a 20-step `posformer train` run with checkpoints at steps 10 and 20."""
    from posformer.tasks.causal_lm import train_causal_lm
    from posformer.train.settings import RunSettings
    from train_helpers import tiny_run, write_corpus

    root.mkdir(parents=True, exist_ok=True)
    config = tiny_run(write_corpus(root / "text.txt"), 20, keep_last=2)
    train_causal_lm(RunSettings.from_dict(config), str(root / "run"), log=lambda line: None, progress=False)
    return config, root / "run"


def step_dir(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step-{step:08d}"
