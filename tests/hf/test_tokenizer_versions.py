"""Every tokenizer posformer writes loads under transformers 4.x and 5.x, whichever of them wrote it, with the same ids.

This interpreter writes (a BPE of `posformer tokenizer train`, a packed run trained with it and its checkpoint,
`save_pretrained` of a model with that tokenizer, `convert --to-hf` of the run); the interpreter of the other major
version (`make test`'s two venvs: .venv has transformers 4.57.6, .venv-hf5 5.24.0; HF4_VENV and HF5_VENV name them
elsewhere, relative to the checkout or absolute) reads each with `AutoTokenizer.from_pretrained` and with
`posformer.load_tokenizer`, in a subprocess. The ids are those of the `tokenizers` library reading the BPE's own
tokenizer.json. A folder that transformers 5.x itself saved (`"tokenizer_class": "TokenizersBackend"`, a class 4.x
lacks) is read by posformer's loader under 4.x too, and by `convert` rewritten in the form both read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import posformer as pf
from bpe_run import bpe_and_run
from hf_oracle import TRANSFORMERS_5
from posformer.cli import main
from posformer.utils.tokenizer_config import portable_tokenizer_config

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["ROMEO: what light through yonder window breaks?", "  two  spaces\nand a line, é ü 😀", "<|endoftext|>x"]
# transformers 5.24.0's tokenizer_config.json for the BPE, as its `save_pretrained` writes it (TokenizersBackend)
WRITTEN_BY_5 = {
    "backend": "tokenizers",
    "clean_up_tokenization_spaces": False,
    "eos_token": "<|endoftext|>",
    "is_local": True,
    "local_files_only": False,
    "model_input_names": ["input_ids", "attention_mask"],
    "model_max_length": 1000000000000000019884624838656,
    "tokenizer_class": "TokenizersBackend",
}
READER = r"""
import json, sys, transformers
from transformers import AutoTokenizer
import posformer as pf
texts, folders = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"version": transformers.__version__}
for name, (folder, readers) in folders.items():
    for reader in readers:
        tok = AutoTokenizer.from_pretrained(folder) if reader == "auto" else pf.load_tokenizer(folder)
        out[f"{name}/{reader}"] = {
            "ids": [tok(text)["input_ids"] for text in texts], "eos": tok.eos_token_id, "bos": tok.bos_token_id
        }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def other_python() -> Path:
    """The python of the other transformers major version; the test is skipped, saying why, when it is missing."""
    variable, default = ("HF4_VENV", ".venv") if TRANSFORMERS_5 else ("HF5_VENV", ".venv-hf5")
    python = ROOT / os.environ.get(variable, default) / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no {python} (set {variable} to the venv of transformers {4 if TRANSFORMERS_5 else 5}.x)")
    return python


def read_elsewhere(python: Path, folders: dict[str, tuple[Path, tuple[str, ...]]]) -> dict:
    """What the other version's AutoTokenizer ("auto") and posformer.load_tokenizer ("pf") read from each folder."""
    plain = {name: (str(folder), readers) for name, (folder, readers) in folders.items()}
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run(
        [str(python), "-c", READER, json.dumps(TEXTS), json.dumps(plain)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    if read["version"].split(".")[0] == ("5" if TRANSFORMERS_5 else "4"):
        pytest.skip(f"{python} has transformers {read['version']}, the same major version as this one")
    return read


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """Every kind of folder posformer writes a tokenizer into, written by this interpreter's transformers."""
    root = tmp_path_factory.mktemp("written")
    bpe, run = bpe_and_run(root)
    tokenizer = pf.load_tokenizer(bpe)  # 5.x: a TokenizersBackend, whose own save_pretrained names that class
    model = pf.load(run)
    model.save_pretrained(root / "saved", tokenizer=tokenizer)
    assert main(["convert", "--to-hf", str(run), "--out", str(root / "export")]) == 0
    tokenizer.save_pretrained(root / "by-transformers")  # transformers' own files, as they are
    checkpoint = sorted((run / "checkpoints").iterdir())[-1]
    return {
        "bpe": bpe,
        "run": run,
        "checkpoint": checkpoint,
        "saved": root / "saved",
        "export": root / "export",
        "by-transformers": root / "by-transformers",
    }


def expected(bpe: Path) -> list[list[int]]:
    """The ids of `TEXTS` by the `tokenizers` library reading the BPE's tokenizer.json (no special token added)."""
    tokenizer = Tokenizer.from_file(str(bpe / "tokenizer.json"))
    return [tokenizer.encode(text, add_special_tokens=False).ids for text in TEXTS]


def test_every_tokenizer_posformer_writes_loads_in_the_other_version_with_the_same_ids(other_python, written) -> None:
    both = ("auto", "pf")
    folders = {name: (written[name], both) for name in ("bpe", "checkpoint", "saved", "export")}
    folders["run"] = (written["run"], ("pf",))  # a run dir holds its tokenizer in its checkpoints
    folders["by-transformers"] = (written["by-transformers"], ("pf",) if TRANSFORMERS_5 else both)
    read = read_elsewhere(other_python, folders)
    want = expected(written["bpe"])
    assert want[2][0] == 0  # "<|endoftext|>" is the special token 0, not its characters
    for name, (folder, readers) in folders.items():
        for reader in readers:
            got = read[f"{name}/{reader}"]
            assert (got["ids"], got["eos"], got["bos"]) == (want, 0, None), f"{name} read by {reader}"
    for name in ("bpe", "checkpoint", "saved", "export"):  # and this version reads them alike
        here = pf.load_tokenizer(written[name])
        assert [here(text)["input_ids"] for text in TEXTS] == want, name


def test_posformer_writes_no_class_that_transformers_4_lacks(written) -> None:
    for folder in (written["bpe"], written["checkpoint"], written["saved"], written["export"]):
        config = json.loads((folder / "tokenizer_config.json").read_text())
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast", folder
        assert "is_local" not in config and "local_files_only" not in config, folder


def test_a_folder_transformers_5_wrote_is_read_and_exported_in_the_portable_form(written, tmp_path) -> None:
    folder = tmp_path / "by-5"
    folder.mkdir()
    shutil.copy(written["bpe"] / "tokenizer.json", folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(WRITTEN_BY_5))
    tokenizer = pf.load_tokenizer(folder)  # under 4.x AutoTokenizer alone refuses it: no such class
    assert [tokenizer(text)["input_ids"] for text in TEXTS] == expected(written["bpe"])
    assert tokenizer.eos_token_id == 0
    portable = json.loads(portable_tokenizer_config(json.dumps(WRITTEN_BY_5)))
    assert portable == {
        **{k: v for k, v in WRITTEN_BY_5.items() if k not in ("is_local", "local_files_only")},
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    run = tmp_path / "run"
    shutil.copytree(written["run"], run)
    for checkpoint in (run / "checkpoints").iterdir():  # a run trained under 5.x before posformer wrote this form
        config = checkpoint / "tokenizer_config.json"
        config.write_text(json.dumps(WRITTEN_BY_5))
        manifest = json.loads((checkpoint / "manifest.json").read_text())
        manifest["files"]["tokenizer_config.json"] = {"sha256": sha256(config), "bytes": config.stat().st_size}
        (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    assert main(["convert", "--to-hf", str(run), "--out", str(tmp_path / "export")]) == 0
    exported = json.loads((tmp_path / "export" / "tokenizer_config.json").read_text())
    assert exported["tokenizer_class"] == "PreTrainedTokenizerFast" and exported["eos_token"] == "<|endoftext|>"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
