"""posformer's own tokenizers (one id per character, or per UTF-8 byte) as Hugging Face tokenizer files.

    files = tokenizer_files(char_tokenizer(["\\n", " ", "a"], eod=True), eos_token=EOD_TOKEN)  # {"tokenizer.json": ...}
    files = tokenizer_files(byte_tokenizer(eod=True), eos_token=EOD_TOKEN)  # token id b is byte b; 256 is EOD
    found = stored_chars(directory)  # the character vocabulary stored there, or None

`transformers.AutoTokenizer.from_pretrained` reads the files as a `PreTrainedTokenizerFast`: `tok(text)["input_ids"]`
are posformer's ids (no special token is added) and `tok.decode(ids)` is the text again. Characters are a BPE model
with no merges (no pre-tokenizer, so every character, "\\n" and " " included, is one token) and a `Fuse` decoder;
bytes are GPT-2's byte-level alphabet (byte b is the character `bytes_to_unicode()[b]`, with id b).
With `eod=True` one more id, after the others, is the end-of-document token `<|endoftext|>` (a special token; the
tokenizer_config.json names it `eos_token`, so AutoTokenizer's `eos_token_id` is posformer's EOD id).

Runs trained before these files wrote their character tokenizer as `{"type": "char", "chars": [...]}` (the
legacy form); `stored_chars` reads both forms, and `fast_tokenizer` turns a legacy vocabulary into the tokenizer
that AutoTokenizer would read from the new files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from posformer.checkpoints.manifest import verify_if_present
from posformer.checkpoints.model_dir import OutsideModelDir, model_file, read_json
from posformer.hf.tokenizer_files import TOKENIZER_CONFIG, TOKENIZER_JSON

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

LEGACY_TYPE = "char"
FAST_OPTIONS = {"clean_up_tokenization_spaces": False, "model_input_names": ["input_ids", "attention_mask"]}
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
EOD_TOKEN = "<|endoftext|>"  # GPT-2's end-of-document token


@dataclass(frozen=True)
class StoredChars:
    """The character vocabulary of a tokenizer.json, in id order; `legacy`: the file is `{"type": "char", ...}`;
    `eod`: the file declares `EOD_TOKEN` with the id after the characters."""

    chars: list[str]
    legacy: bool
    eod: bool = False


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 byte values to printable characters (`encoder.py` of openai/gpt-2)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return {b: chr(b if b in printable else next(extra)) for b in range(256)}


def _distinct_chars(chars: object) -> bool:
    return (
        isinstance(chars, list)
        and all(isinstance(c, str) and len(c) == 1 for c in chars)
        and len(set(chars)) == len(chars)
    )


def _with_eod(tokenizer: Tokenizer, eod: bool) -> Tokenizer:
    if eod:
        tokenizer.add_special_tokens([AddedToken(EOD_TOKEN, special=True)])
    return tokenizer


def char_tokenizer(chars: list[str], eod: bool = False) -> Tokenizer:
    """One token per character of `chars`, with id `chars.index(c)`; unknown characters are dropped on encode.
    `eod`: `EOD_TOKEN` is id len(chars)."""
    if not _distinct_chars(chars):
        raise ValueError(f"char_tokenizer: expected a list of distinct single characters, got {chars!r:.80}")
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(chars)}, merges=[]))
    tokenizer.decoder = decoders.Fuse()
    return _with_eod(tokenizer, eod)


def byte_tokenizer(eod: bool = False) -> Tokenizer:
    """The UTF-8 bytes of the text as ids 0..255 (vocabulary 256, or 257 with `eod`: `EOD_TOKEN` is id 256);
    decoding replaces invalid UTF-8 with U+FFFD."""
    vocab = {c: b for b, c in bytes_to_unicode().items()}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return _with_eod(tokenizer, eod)


def tokenizer_files(tokenizer: Tokenizer, eos_token: str | None = None) -> dict[str, str]:
    """{file name: ASCII text}: tokenizer.json and a tokenizer_config.json naming `PreTrainedTokenizerFast` (and
    `eos_token`, a special token of `tokenizer`, where given)."""
    config = {"tokenizer_class": TOKENIZER_CLASS, **FAST_OPTIONS}
    if eos_token is not None:
        config["eos_token"] = eos_token
    return {
        TOKENIZER_JSON: json.dumps(json.loads(tokenizer.to_str()), ensure_ascii=True),
        TOKENIZER_CONFIG: json.dumps(config, indent=2),
    }


def fast_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """`tokenizer` as the `transformers.PreTrainedTokenizerFast` that AutoTokenizer reads from its files."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **FAST_OPTIONS)


def _is_eod_entry(added: object, eod_id: int) -> bool:
    """Whether an `added_tokens` entry of a tokenizer.json is `EOD_TOKEN`, special, with id `eod_id`."""
    return (
        isinstance(added, dict)
        and added.get("content") == EOD_TOKEN
        and added.get("special") is True
        and type(added.get("id")) is int
        and added.get("id") == eod_id
    )


def _hf_form_chars(data: dict) -> StoredChars | None:
    """The characters of a tokenizer.json that `char_tokenizer` wrote, in id order; None for any other."""
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or model.get("merges") != []:
        return None
    plain = all(data.get(key) is None for key in ("normalizer", "pre_tokenizer", "post_processor"))
    added = data.get("added_tokens")
    if not plain or not isinstance(added, list) or len(added) > 1 or data.get("decoder") != {"type": "Fuse"}:
        return None
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or model.get("unk_token") is not None:
        return None
    ids = list(vocab.values())
    if not all(type(i) is int for i in ids) or sorted(ids) != list(range(len(ids))):
        return None
    if added and not _is_eod_entry(added[0], len(ids)):
        return None
    chars = sorted(vocab, key=vocab.__getitem__)
    return StoredChars(chars, legacy=False, eod=bool(added)) if all(len(c) == 1 for c in chars) else None


def parse_chars(data: dict, path: str | Path) -> StoredChars | None:
    """The character vocabulary of tokenizer.json `data` read from `path`, in either form; None when it is another
    tokenizer. A legacy file with a bad "chars" list is a `ValueError` naming `path`."""
    if data.get("type") == LEGACY_TYPE:
        chars = data.get("chars")
        if not _distinct_chars(chars):
            raise ValueError(
                f'{path} is not a posformer character tokenizer file: expected {{"type": "char", '
                '"chars": [distinct single characters]}'
            )
        return StoredChars(chars, legacy=True)
    return _hf_form_chars(data)


def stored_chars(directory: Path) -> StoredChars | None:
    """The character vocabulary of `directory`'s tokenizer.json, in either form; None when there is no such file,
    or it holds another tokenizer, or it is not JSON (the Hugging Face reader then names what is wrong).

    The file is read through `model_dir.model_file` and, where `directory` holds a manifest, checked against it.
    """
    path = model_file(directory, TOKENIZER_JSON)
    if not path.is_file():
        return None
    verify_if_present(directory, only=(TOKENIZER_JSON,))
    try:
        data = read_json(directory, TOKENIZER_JSON)
    except OutsideModelDir:
        raise
    except (ValueError, OSError):
        return None
    return parse_chars(data, path)
