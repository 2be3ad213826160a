"""The tokenizer of a causal-LM run (`data.tokenizer`), and the end-of-document (EOD) id it puts after each document.

    tokenizer = build_tokenizer("char", lambda: documents(paths))  # or "bytes", a tokenizer dir, a tokenizer.json
    tokenizer.encode(text)   # ids, no special tokens
    tokenizer.eod_id         # the id after each document
    tokenizer.files()        # {name: ASCII text}: Hugging Face tokenizer files to store beside the model
    special_ids(tokenizer)   # {"eos_token_id": EOD id, "bos_token_id": BOS id or None}, for the model's Config

"char" and "bytes" are posformer's own tokenizers (`data.text`), whose EOD is one extra id, `<|endoftext|>`. A
directory is read with `AutoTokenizer` (a Hugging Face tokenizer, `posformer tokenizer train`'s output, or a model
directory holding one); a file is a `tokenizers` tokenizer.json. Their EOD is the eos token (else the sep token); a
tokenizer.json has no eos token of its own, so its EOD is the first of `EOD_TOKENS` among its special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from posformer.data.text import ByteTokenizer, CharTokenizer
from posformer.hf.char_byte_tokenizers import EOD_TOKEN, stored_chars, tokenizer_files
from posformer.utils.file_limits import TOKENIZER, check_size
from posformer.utils.tokenizer_config import saved_tokenizer_files
from posformer.utils.user_files import regular_file

EOD_TOKENS = (EOD_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[SEP]")


class HFTokenizer:
    """A `transformers` tokenizer as the causal-LM job uses it: `encode` adds no special token, `decode` shows them."""

    def __init__(self, tokenizer, eod_id: int, files: dict[str, str]) -> None:
        self.tokenizer, self.eod_id, self._files = tokenizer, eod_id, files

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    @property
    def bos_id(self) -> int | None:
        """The id of its beginning-of-sequence token; None when it has none."""
        return self.tokenizer.bos_token_id

    def files(self) -> dict[str, str]:
        return dict(self._files)


def special_ids(tokenizer: CharTokenizer | ByteTokenizer | HFTokenizer) -> dict[str, int | None]:
    """The model's special ids for `tokenizer`: {"eos_token_id": its EOD id, "bos_token_id": its BOS id, None when it
    has none (posformer's char and byte tokenizers, a BPE of `posformer tokenizer train`)}."""
    bos = tokenizer.bos_id if isinstance(tokenizer, HFTokenizer) else None
    return {"eos_token_id": tokenizer.eod_id, "bos_token_id": bos}


def build_tokenizer(
    spec: str, train_documents: Callable[[], Iterable[str]], name: str = "data.tokenizer"
) -> CharTokenizer | ByteTokenizer | HFTokenizer:
    """The tokenizer `spec` names; `train_documents()` is read (only) for the vocabulary of "char".

    Errors name the setting: `name`=spec.
    """
    if spec == "char":
        return CharTokenizer.from_documents(train_documents())
    if spec == "bytes":
        return ByteTokenizer()
    path = Path(spec)
    if path.is_file():
        return _tokenizer_json(path, name)
    if not path.is_dir():
        raise ValueError(
            f"{name}={spec!r}: expected 'char', 'bytes', a directory holding a Hugging Face tokenizer, or a "
            "tokenizer.json file"
        )
    found = stored_chars(path)
    if found is not None and found.eod:
        return CharTokenizer(found.chars)
    from posformer.hf.api import load_tokenizer

    tokenizer = load_tokenizer(path)
    eod_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if eod_id is None:
        raise ValueError(
            f"{name}={spec!r}: the tokenizer has no end-of-document token to put between documents: "
            "expected an eos_token (or a sep_token) in its tokenizer_config.json"
        )
    return HFTokenizer(tokenizer, eod_id, _saved_files(tokenizer))


def _tokenizer_json(path: Path, name: str) -> HFTokenizer:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    regular_file(path, f"{name}={str(path)!r}")
    check_size(path, f"{name}={str(path)!r}", TOKENIZER)
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust reader raises a bare Exception
        raise ValueError(f"{name}={str(path)!r} is not a tokenizers tokenizer.json: {err}") from None
    special = {token.content for token in backend.get_added_tokens_decoder().values() if token.special}
    eod = next((token for token in EOD_TOKENS if token in special), None)
    if eod is None:
        raise ValueError(
            f"{name}={str(path)!r}: the tokenizer has no end-of-document token to put between documents: expected "
            f"one of the special tokens {', '.join(EOD_TOKENS)} (or give a directory whose tokenizer_config.json "
            "names an eos_token)"
        )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eod, clean_up_tokenization_spaces=False)
    return HFTokenizer(tokenizer, tokenizer.eos_token_id, tokenizer_files(backend, eos_token=eod))


def _saved_files(tokenizer) -> dict[str, str]:
    """The JSON files `tokenizer.save_pretrained` writes, as ASCII text (what AutoTokenizer needs of a fast one),
    the tokenizer_config.json in the form transformers 4.x and 5.x both read (`utils.tokenizer_config`)."""
    saved = saved_tokenizer_files(tokenizer, suffix=".json")
    return {name: json.dumps(json.loads(text), ensure_ascii=True) for name, text in saved.items()}
