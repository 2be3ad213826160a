"""The files a model directory carries beside its weights, written and read as posformer writes and reads every file
(`utils.safe_write`, `utils.file_limits`): generation_config.json, tokenizer_config.json and save_pretrained's
`extra_files`.

Writing: a symlink planted at a file's name, pointing outside the output directory, is replaced, never written
through; an `extra_files` name that could leave the directory is refused before anything is written. Reading: an
oversized file (a sparse one of many GiB, which costs nothing on disk) is refused by its size before a byte is read,
and a malformed one is a ValueError naming the file, in `pf.load`, `posformer convert` and `save_pretrained` alike.
A generation_config.json's max_new_tokens is a size too: decoding (the KV cache, beam search's finished
hypotheses) allocates room for what it reaches, not for it. A training checkpoint's `extra_files` follow the rules
of save_pretrained's, and the files a tokenizer saves to be stored beside a model are read within a tokenizer
file's limit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_fixtures import refused, save_hf_llama
from torch.utils._python_dispatch import TorchDispatchMode

import posformer as pf
from posformer.data import lm_tokenizers
from posformer.generation import GenerationConfig, decoding
from posformer.pretrained import config_json, write_pretrained
from posformer.train.training_checkpoint import CheckpointManager
from posformer.utils.file_limits import TOKENIZER
from posformer.utils.tokenizer_config import saved_tokenizer_files

SECRET = "outside the directory: must stay as it is\n"
HUGE = 64 << 30  # a sparse file of 64 GiB: read whole, it would exhaust memory


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """`secret.txt` in a folder outside every output directory."""
    (tmp_path / "outside").mkdir()
    path = tmp_path / "outside" / "secret.txt"
    path.write_text(SECRET)
    return path


def _model(**generation) -> pf.Transformer:
    torch.manual_seed(0)
    cfg = pf.Config.preset("llama", vocab_size=61, d_model=32, n_layers=1, n_heads=4, d_ff=48, hf_model_type="llama")
    model = pf.Transformer(cfg).eval()
    model.generation_config = GenerationConfig(**generation)
    return model


def _planted(out: Path, name: str, target: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).symlink_to(target)
    return out / name


@pytest.mark.parametrize("writer", ["save_pretrained", "to_hf"])
def test_generation_config_is_never_written_through_a_planted_link(tmp_path, outside, writer) -> None:
    link = _planted(tmp_path / "out", "generation_config.json", outside)
    model = _model(max_new_tokens=5, do_sample=False)
    model.save_pretrained(link.parent) if writer == "save_pretrained" else pf.to_hf(model, link.parent)
    assert outside.read_text() == SECRET
    assert not link.is_symlink() and json.loads(link.read_text()) == {"do_sample": False, "max_new_tokens": 5}


@pytest.mark.parametrize("name", ["../evil", "sub/../../evil", "..", "", "a/b", "config.json", "README.md"])
def test_extra_files_never_leave_the_output_directory_or_replace_the_models_own(tmp_path, outside, name) -> None:
    """A name with a folder or '..' would be written beside the staging folder, straight through a link planted
    there (out/evil -> outside): refused, as is a name of a file the model writes itself, before any write."""
    link = _planted(tmp_path / "out", "evil", outside)
    with pytest.raises(ValueError, match=r"extra_files name .* is invalid"):
        write_pretrained(_model(), link.parent, extra_files={name: "PWNED"})
    assert outside.read_text() == SECRET
    assert os.listdir(link.parent) == ["evil"]


def test_extra_files_are_written_as_utf8(tmp_path) -> None:
    write_pretrained(_model(), tmp_path / "out", extra_files={"notes.txt": "Ġ λ ✓"})
    assert (tmp_path / "out" / "notes.txt").read_bytes() == "Ġ λ ✓".encode()


@pytest.fixture
def saved(tmp_path) -> Path:
    out = tmp_path / "model"
    _model(max_new_tokens=3).save_pretrained(out)
    return out


def test_an_oversized_generation_config_is_refused_by_its_size_naming_it(saved) -> None:
    os.truncate(saved / "generation_config.json", HUGE)
    with pytest.raises(ValueError, match=r"generation_config.json is too large: 68,719,476,736 bytes, over the 8 MiB"):
        pf.load(saved)


@pytest.mark.parametrize(
    "content,message",
    [
        (b"{not json", r"generation_config.json is not valid JSON at line 1, column 2"),
        (b'\xff{"max_new_tokens": 3}', r"generation_config.json is not valid JSON: 'utf-8' codec"),
        (b'{"max_new_tokens": 1' + b"0" * 5000 + b"}", r"generation_config.json is refused: it holds an integer"),
        (b'{"max_new_tokens": "3"}', r"generation_config.json: max_new_tokens='3' is invalid"),
    ],
    ids=["not-json", "not-utf8", "integer-too-long", "wrong-kind"],
)
def test_a_malformed_generation_config_is_refused_naming_it(saved, content: bytes, message: str) -> None:
    (saved / "generation_config.json").write_bytes(content)
    with pytest.raises(ValueError, match=message):
        pf.load(saved)


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("tokenizer_config.json", b"{not json", "tokenizer_config.json is not valid JSON at line 1, column 2"),
        ("tokenizer_config.json", b"[1, 2]", "tokenizer_config.json must hold a JSON object, got list"),
        ("tokenizer_config.json", None, "tokenizer_config.json is too large: 68,719,476,736 bytes, over the 64 MiB"),
        ("tokenizer.json", None, "tokenizer.json is too large: 68,719,476,736 bytes, over the 64 MiB"),
    ],
    ids=["config-not-json", "config-not-object", "config-oversized", "tokenizer-oversized"],
)
def test_convert_refuses_a_malformed_or_oversized_tokenizer_file_naming_it(tmp_path, name, content, message) -> None:
    """Before, convert copied a tokenizer_config.json that was not JSON into its output as it was, and any tokenizer
    file whatever its size: now each is checked before anything is written."""
    source = save_hf_llama(tmp_path / "hf")
    if content is None:
        os.truncate(source / name, HUGE)
    else:
        (source / name).write_bytes(content)
    out = tmp_path / "out"
    err = refused("convert", "--from-hf", str(source), "--out", str(out))
    assert f"{source / name}" in err and message in err
    assert not out.exists() or not any(out.iterdir())


class _WritesTokenizerConfig:
    """A tokenizer whose `save_pretrained` writes `content` as tokenizer_config.json (None: a sparse giant)."""

    def __init__(self, content: bytes | None) -> None:
        self.content = content

    def save_pretrained(self, directory: str) -> None:
        path = Path(directory) / "tokenizer_config.json"
        path.write_bytes(self.content or b"{}")
        if self.content is None:
            os.truncate(path, HUGE)


@pytest.mark.parametrize(
    "content,message",
    [
        (b"{not json", r"tokenizer_config.json is not valid JSON at line 1, column 2"),
        (b'"a string"', r"tokenizer_config.json must hold a JSON object, got str"),
        (None, r"tokenizer_config.json is too large: 68,719,476,736 bytes, over the 64 MiB"),
    ],
    ids=["not-json", "not-object", "oversized"],
)
def test_save_pretrained_refuses_a_tokenizer_config_it_cannot_read_and_writes_nothing(tmp_path, content, message):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message):
        _model().save_pretrained(out, tokenizer=_WritesTokenizerConfig(content))
    assert os.listdir(out) == []


def test_a_huge_max_new_tokens_from_the_file_allocates_only_what_decoding_reaches(tmp_path) -> None:
    """transformers' files may set max_new_tokens far beyond any output (2**31 - 10 here): with every token an end,
    decoding stops after one, and no cache of 2**31 positions (256 GiB here) is ever asked for."""
    model = _model(max_new_tokens=2**31 - 10, eos_token_id=list(range(61)))
    model.save_pretrained(tmp_path / "model")
    loaded = pf.load(tmp_path / "model")
    assert loaded.generation_config.max_new_tokens == 2**31 - 10
    prompt = torch.tensor([[5, 6, 7]])
    assert torch.equal(loaded.generate(prompt), model.generate(prompt, max_new_tokens=1))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_tokens_do_not_depend_on_the_room_made_at_once(monkeypatch, num_beams) -> None:
    """Past the room made at once for new tokens, the cache grows: the tokens are those decoded with room for all."""
    model = _model()
    prompt = torch.tensor([[5, 6, 7], [8, 9, 10]])
    whole = model.generate(prompt, max_new_tokens=9, eos_token_id=[], num_beams=num_beams)
    monkeypatch.setattr(decoding, "PREALLOCATED_NEW_TOKENS", 2)
    assert torch.equal(model.generate(prompt, max_new_tokens=9, eos_token_id=[], num_beams=num_beams), whole)


def _save_checkpoint(run: Path, extra_files: dict[str, str]) -> Path:
    model = _model()
    return CheckpointManager(run, keep_last=2).save(1, model, config_json(model.cfg), {"step": 1}, extra_files)


@pytest.mark.parametrize("name", ["../evil", "sub/../../evil", "..", "", "a/b", "config.json", "manifest.json"])
def test_checkpoint_extra_files_never_leave_the_checkpoint_or_replace_its_own(tmp_path, outside, name) -> None:
    """A training checkpoint is staged in checkpoints/.tmp-*/: `../evil` would be written to checkpoints/evil,
    through a link planted there; a name of the checkpoint's own file would replace it. Both refused, before any
    write, by the check save_pretrained makes."""
    link = _planted(tmp_path / "run" / "checkpoints", "evil", outside)
    with pytest.raises(ValueError, match=r"checkpoint: extra_files name .* is invalid"):
        _save_checkpoint(tmp_path / "run", {name: "PWNED"})
    assert outside.read_text() == SECRET
    assert os.listdir(link.parent) == ["evil"]


UNDER_ASCII_LOCALE = """
import sys
from pathlib import Path
from posformer.pretrained import write_pretrained
from test_model_side_files import TEXT, _model, _save_checkpoint
out = Path(sys.argv[1])
write_pretrained(_model(), out / "model", extra_files={"notes.txt": TEXT})
_save_checkpoint(out / "run", {"notes.txt": TEXT})
"""
TEXT = "Ġ λ ✓"


def test_extra_files_are_utf8_whatever_the_locale(tmp_path) -> None:
    """Under the C locale with its coercion and UTF-8 mode off, Python's default encoding is ASCII (as it is
    cp1252 on many Windows machines): text written in it would fail or differ from the UTF-8 a tokenizer.json is."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    code = "import locale; print(locale.getpreferredencoding(False))"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() in (
        "ANSI_X3.4-1968",
        "ascii",
    )
    done = subprocess.run([sys.executable, "-c", UNDER_ASCII_LOCALE, str(tmp_path)], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    expected = TEXT.encode()
    assert (tmp_path / "model" / "notes.txt").read_bytes() == expected
    assert (tmp_path / "run" / "checkpoints" / "step-00000001" / "notes.txt").read_bytes() == expected


class _SavesAnOversizedFile:
    """A tokenizer whose `save_pretrained` writes a tokenizer.json one byte over a tokenizer file's limit (sparse)."""

    def save_pretrained(self, directory: str) -> None:
        path = Path(directory) / "tokenizer.json"
        path.write_bytes(b"{}")
        os.truncate(path, TOKENIZER.bytes + 1)


@pytest.mark.parametrize("files_of", [saved_tokenizer_files, lm_tokenizers._saved_files], ids=lambda f: f.__module__)
def test_a_tokenizers_saved_files_are_read_within_the_tokenizer_limit(files_of) -> None:
    """The files a tokenizer saves, to be stored in every checkpoint, were read whole whatever their size."""
    with pytest.raises(ValueError, match=r"tokenizer.json is too large: 67,108,865 bytes, over the 64 MiB limit"):
        files_of(_SavesAnOversizedFile())


class _RefusesLargeTensors(TorchDispatchMode):
    """Refuses, before it is made, any tensor of more than `limit` elements a factory op (full, empty, zeros ...)
    is asked for, and any larger tensor another op returns."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def _check(self, numel: int, func) -> None:
        if numel > self.limit:
            raise MemoryError(f"{func} asked for a tensor of {numel:,} elements, over {self.limit:,}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] in ("full", "empty", "zeros", "ones", "new_full", "new_empty", "new_zeros"):
            size = next(arg for arg in args if isinstance(arg, (list, tuple)))
            self._check(math.prod(size), func)
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._check(tensor.numel(), func)
        return out


def _beams(model: pf.Transformer, max_new_tokens: int, **options) -> tuple[torch.Tensor, ...]:
    """Beam search (3 beams) over two prompts, ended by 4 of the 61 tokens: its sequences, sequences_scores,
    beam_indices and the scores of each step it took."""
    prompt = torch.tensor([[5, 6, 7], [8, 9, 10]])
    out = model.generate(
        prompt,
        max_new_tokens=max_new_tokens,
        num_beams=3,
        eos_token_id=[3, 11, 17, 29],
        pad_token_id=0,
        return_dict_in_generate=True,
        output_scores=True,
        **options,
    )
    return out.sequences, out.sequences_scores, out.beam_indices, torch.stack(out.scores)


def test_beam_search_with_a_huge_max_new_tokens_allocates_only_what_it_reaches() -> None:
    """Beam search kept its finished hypotheses in two (B, beams, max_new_tokens) tensors: 2 x 96 GiB here, asked
    for at the first step. Done once 3 hypotheses end (early_stopping=True), it stops at an eos after a few steps,
    as with a max_new_tokens it never reaches."""
    model = _model()
    reached = _beams(model, max_new_tokens=30, early_stopping=True)
    assert reached[-1].shape[0] < 30, "the search must stop at an eos, not at max_new_tokens"
    with torch.no_grad(), _RefusesLargeTensors(limit=2**22):
        huge = _beams(model, max_new_tokens=2**31 - 10, early_stopping=True)
    for ours, expected in zip(huge, reached, strict=True):
        assert torch.equal(ours, expected)


@pytest.mark.parametrize("early_stopping", [True, False])
def test_beam_search_results_do_not_depend_on_the_room_made_at_once(monkeypatch, early_stopping) -> None:
    """With room for one new token at once, the finished hypotheses (of 2 to 9 new tokens here) and the cache grow:
    the sequences, scores and beam indices are those of a search with room for all."""
    model = _model()
    whole = _beams(model, max_new_tokens=9, early_stopping=early_stopping)
    monkeypatch.setattr(decoding, "PREALLOCATED_NEW_TOKENS", 1)
    for ours, expected in zip(_beams(model, max_new_tokens=9, early_stopping=early_stopping), whole, strict=True):
        assert torch.equal(ours, expected)
