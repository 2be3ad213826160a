"""The corpora and the tokenizer of the language-model experiments (extrapolate, extend, the longeval haystacks).

Corpora:
  "gutenberg"    ../shared/data/gutenberg/*.txt (25 public-domain books): train on all but
                 the held-out books, evaluate on each held-out book as one long document.
  "shakespeare"  the shipped Tiny Shakespeare sample: first 90% train, last 10% eval.
WikiText-2 (test split) can be added as a second evaluation set.

Every text is read with utf-8-sig and its line endings normalised to "\\n". The
tokenizer is a byte-level BPE trained with `tokenizers` on (a capped prefix of
every document of) the training split.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from posformer.data.shared import fetch_hint
from posformer.data.text_files import default_corpus
from posformer.utils.file_limits import DATA
from posformer.utils.user_files import read_text_file
from posformer.utils.validation import fail

if TYPE_CHECKING:  # torch is imported by the functions that make tensors: the knobs read CORPORA without it
    from torch import Tensor

CORPORA = ("gutenberg", "shakespeare")
HELD_OUT_BOOKS = ["middlemarch.txt", "the-republic.txt", "ulysses.txt"]  # the Gutenberg books kept out of training
EOS = "<|endoftext|>"
START = re.compile(r"^\*\*\* ?START OF.*$", re.MULTILINE)
END = re.compile(r"^\*\*\* ?END OF.*$", re.MULTILINE)


def read_document(path: Path) -> str:
    """A text file as UTF-8 (a byte-order mark dropped) with "\\n" line endings."""
    text = read_text_file(path, "extrapolate: data file", limit=DATA)
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def strip_gutenberg(text: str, name: str = "book") -> str:
    """The text between the `*** START OF` and `*** END OF` marker lines (both excluded)."""
    start, end = START.search(text), END.search(text)
    if start is None or end is None or end.start() <= start.end():
        raise ValueError(f"extrapolate: {name} has no '*** START OF' / '*** END OF' Project Gutenberg markers")
    return text[start.end() : end.start()].strip("\n") + "\n"


def _require(path: Path, what: str, name: str, data_dir: Path) -> Path:
    """`path` (part of the dataset `name` in `data_dir`), or an error naming the command that fetches it."""
    if not path.exists():
        raise FileNotFoundError(
            f"extrapolate: {what} {path} does not exist: {fetch_hint(name, data_dir)} (or give --data-dir)"
        )
    return path


@dataclass
class Corpus:
    """Training documents and evaluation sets: {set name: {document name: text}}."""

    train: dict[str, str]
    eval_sets: dict[str, dict[str, str]] = field(default_factory=dict)
    held_out: list[str] = field(default_factory=list)


def load_corpus(corpus: str, data_dir: str | Path, held_out: list[str], wikitext: bool) -> Corpus:
    """Read the training texts and the evaluation sets the settings name."""
    data_dir = Path(data_dir)
    if corpus == "shakespeare":
        text = read_document(default_corpus())
        cut = int(0.9 * len(text))
        result = Corpus({"tinyshakespeare": text[:cut]}, {"tinyshakespeare": {"tinyshakespeare": text[cut:]}})
    elif corpus == "gutenberg":
        folder = _require(data_dir / "gutenberg", "Gutenberg folder", "gutenberg", data_dir)
        books = {p.name: p for p in sorted(folder.glob("*.txt"))}
        missing = [b for b in held_out if b not in books]
        if missing:
            raise FileNotFoundError(
                f"extrapolate: held-out book(s) {missing} are not in {folder}; available: {', '.join(books)}; "
                f"{fetch_hint('gutenberg', data_dir)}"
            )
        texts = {name: strip_gutenberg(read_document(path), name) for name, path in books.items()}
        result = Corpus(
            {n: t for n, t in texts.items() if n not in held_out},
            {"gutenberg": {n: texts[n] for n in held_out}},
            list(held_out),
        )
        if not result.train:
            raise ValueError("extrapolate: every Gutenberg book is held out; nothing is left to train on")
    else:
        fail("extrapolate: corpus", corpus, f"one of {', '.join(CORPORA)}")
    if wikitext:
        path = _require(data_dir / "wikitext-2" / "test.txt", "WikiText-2 file", "wikitext-2", data_dir)
        result.eval_sets["wikitext-2"] = {"test.txt": read_document(path)}
    return result


def train_bpe(texts: dict[str, str], vocab_size: int, max_chars: int, split_digits: bool = False):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on at most `max_chars` characters.

    The cap is spread evenly over the documents (a prefix of each), so every book counts. `split_digits`: every
    digit is a token of its own (LLaMA's rule), so a number reads the same digit by digit wherever it sits.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    share = max(1, max_chars // max(1, len(texts)))
    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    digits = pre_tokenizers.Digits(individual_digits=True)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([digits, byte_level]) if split_digits else byte_level
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    pieces = [line for text in texts.values() for line in text[:share].splitlines(keepends=True)]
    tokenizer.train_from_iterator(pieces, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, unk_token=EOS, model_input_names=["input_ids"]
    )


def encode(tokenizer, text: str, max_chars: int | None = None) -> Tensor:
    """text (optionally its first `max_chars` characters) -> (N,) token ids, encoded paragraph by paragraph, no
    special tokens. tokenizer: a Hugging Face fast tokenizer, or any object with encode(text) -> list[int]."""
    import torch

    if max_chars is not None:
        text = text[:max_chars]
    if not hasattr(tokenizer, "backend_tokenizer"):
        return torch.tensor(tokenizer.encode(text), dtype=torch.long)
    paragraphs = re.split(r"(?<=\n\n)", text)
    ids = [i for enc in tokenizer.backend_tokenizer.encode_batch(paragraphs, add_special_tokens=False) for i in enc.ids]
    return torch.tensor(ids, dtype=torch.long)


def train_stream(tokenizer, texts: dict[str, str], max_chars: int | None) -> Tensor:
    """The training documents as one token stream (N,), each followed by EOS; `max_chars` spread over them."""
    import torch

    share = None if max_chars is None else max(1, max_chars // len(texts))
    eos = torch.tensor([tokenizer.convert_tokens_to_ids(EOS)])
    return torch.cat([t for text in texts.values() for t in (encode(tokenizer, text, share), eos)])


def _from_middle(text: str) -> str:
    """The text from the first paragraph break after its middle (skipping title pages and contents)."""
    cut = text.find("\n\n", len(text) // 2)
    return text[cut + 2 :] if cut >= 0 else text


def eval_streams(tokenizer, docs: dict[str, str], budget: int, multiple: int) -> dict[str, Tensor]:
    """Each document's evaluation tokens, (n_d,) with n_d a multiple of `multiple`: `budget` tokens shared evenly.

    The tokens are a continuous run from the first paragraph break after the document's middle
    (from its start when the second half is too short). Documents too short for one `multiple`
    are dropped; a clear error if none is left.
    """
    per_doc = max(multiple, budget // len(docs) // multiple * multiple)
    streams, found = {}, {}
    for name, text in docs.items():
        ids = encode(tokenizer, _from_middle(text), max_chars=per_doc * 12)
        if ids.numel() < per_doc:
            ids = encode(tokenizer, text, max_chars=per_doc * 12)
        n = min(per_doc, ids.numel() // multiple * multiple)
        found[name] = ids.numel()
        if n:
            streams[name] = ids[:n]
    if not streams:
        counts = ", ".join(f"{name}: {n:,}" for name, n in found.items())
        raise ValueError(
            f"the evaluation documents are shorter than the longest eval length, {multiple:,} tokens ({counts} "
            f"tokens): evaluate at most {max(found.values()):,} tokens, or on a longer corpus"
        )
    return streams


def unigram_perplexity(train_ids: Tensor, streams: dict[str, Tensor], vocab_size: int) -> float:
    """The perplexity on every token of `streams` of a unigram model: training-stream frequencies, add-one
    smoothed over the vocabulary. What a model that reads no context at all can reach at best (up to the smoothing)."""
    import torch

    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1
    log_p = (counts / counts.sum()).log()
    ids = torch.cat(list(streams.values()))
    return math.exp(float(-log_p[ids].mean()))
