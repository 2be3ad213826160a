"""What `posformer extend` starts from: a trained run's model, tokenizer, training length and text.

Two kinds of run are read:
  - a row of `posformer extrapolate` (OUTPUT/rows/ROW): its run_config.yaml names the corpus, the held-out
    books and train_len, so the fine-tune reads the same training text and the evaluation the same held-out text;
  - any run or checkpoint with `--text FILE`: the first 90% of the file is the training text, the last 10% the
    evaluation text; train_len comes from run_config.yaml (data.seq_len of `posformer train`) or --train-len.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torch import Tensor

from posformer.experiments import corpus
from posformer.model import Transformer
from posformer.utils.file_limits import TOKENIZER
from posformer.utils.tokenizer_config import saved_tokenizer_files
from posformer.utils.user_files import read_text_file, read_yaml_file, regular_file

TEXT_EVAL_FRACTION = 0.1


@dataclass
class Source:
    """model: the trained model (eval mode); encode: text -> ids (no special tokens); train_ids: (N,) the text to
    fine-tune on; eval_docs: {eval set: {document: text}}; files: the tokenizer files to save beside new models."""

    model: Transformer
    encode: Callable[[str], list[int]]
    tokenizer: object
    train_ids: Tensor
    eval_docs: dict[str, dict[str, str]]
    train_len: int | None
    files: dict[str, str] = field(default_factory=dict)
    description: str = ""


def run_config(run_dir: Path) -> dict:
    """The run_config.yaml of a run directory (or of the run a checkpoint folder belongs to); {} when none."""
    for candidate in (run_dir, run_dir.parent.parent):
        path = candidate / "run_config.yaml"
        if path.is_file():
            saved = read_yaml_file(path, "the run config")
            return saved if isinstance(saved, dict) else {}
    return {}


def _hf_tokenizer(directory: Path):
    from transformers import PreTrainedTokenizerFast

    from posformer.checkpoints.model_dir import model_file
    from posformer.hf.tokenizer_files import check_tokenizer_dir
    from posformer.loading import checkpoint_dir

    folder = checkpoint_dir(directory)
    if not model_file(folder, "tokenizer.json").is_file():
        raise FileNotFoundError(f"extend: {folder} holds no tokenizer.json; give a run saved with its tokenizer")
    return PreTrainedTokenizerFast.from_pretrained(str(folder), **check_tokenizer_dir(folder))


def load_source(run_dir: str | Path, text: str | None, data_dir: str | None = None) -> Source:
    """The model, tokenizer and texts of the run at `run_dir` (see the module docstring)."""
    from posformer.data.shared import default_data_dir
    from posformer.loading import load_model

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(f"extend: run {run_dir} does not exist")
    model = load_model(run_dir).eval()
    config = run_config(run_dir)
    if text is not None:
        return _text_source(model, run_dir, Path(text), config)
    knobs = config.get("extrapolate")
    if knobs is None:
        raise ValueError(
            f"extend: {run_dir} is not a row of `posformer extrapolate` (its run_config.yaml has no "
            "'extrapolate' section): give --text FILE to fine-tune and evaluate on a text file"
        )
    tokenizer = _hf_tokenizer(run_dir)
    texts = corpus.load_corpus(
        knobs["corpus"], knobs.get("data_dir") or data_dir or default_data_dir(), knobs["held_out"], knobs["wikitext"]
    )
    return Source(
        model,
        lambda s: corpus.encode(tokenizer, s).tolist(),
        tokenizer,
        corpus.train_stream(tokenizer, texts.train, knobs.get("train_chars")),
        texts.eval_sets,
        knobs["train_len"],
        saved_tokenizer_files(tokenizer),
        f"the {model.cfg.position} row of an extrapolate run ({knobs['corpus']}, L={knobs['train_len']})",
    )


def _text_source(model: Transformer, run_dir: Path, path: Path, config: dict) -> Source:
    from posformer.loading import checkpoint_dir, load_text_tokenizer, tokenizer_paths

    regular_file(path, f"extend: --text {path}")
    loaded = load_text_tokenizer(run_dir)
    tokenizer = getattr(loaded, "tokenizer", loaded)  # the Hugging Face tokenizer itself, or posformer's own
    text = corpus.read_document(path)
    cut = int(len(text) * (1 - TEXT_EVAL_FRACTION))
    folder = checkpoint_dir(run_dir)
    files = {
        name: read_text_file(file, "tokenizer file", limit=TOKENIZER) for name, file in tokenizer_paths(folder).items()
    }
    seq_len = (config.get("data") or {}).get("seq_len")
    return Source(
        model,
        lambda s: corpus.encode(tokenizer, s).tolist(),
        tokenizer,
        corpus.encode(tokenizer, text[:cut]),
        {path.stem: {path.name: text[cut:]}},
        seq_len,
        files,
        f"{run_dir} on {path}",
    )
