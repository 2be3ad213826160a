"""`posformer tokenizer train`: a byte-level BPE tokenizer learned from documents, for `data.tokenizer`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.limits import MAX_ITEMS, MAX_SEED, MAX_VOCAB
from posformer.utils.options import option


@dataclass
class TokenizerTrainOptions:
    """The options of `posformer tokenizer train`."""

    data: list[str] = option(
        help="files and directories of documents, read as data.train reads them (text files, directories, .jsonl, "
        "saved datasets, .json/.parquet)",
        metavar="PATH",
    )
    vocab_size: int = option(
        help="tokens in all: the 256 bytes, <|endoftext|> and the learned merges",
        minimum=257,
        maximum=MAX_VOCAB,
        metavar="N",
    )
    out: str = option(
        help="output directory for tokenizer.json and tokenizer_config.json (created if needed)", metavar="DIR"
    )
    text_field: str = option("text", "the field of a JSONL line or dataset row that holds the text", metavar="NAME")
    max_documents: int | None = option(
        None,
        "learn from this many documents drawn at random (by --seed) rather than all",
        minimum=1,
        maximum=MAX_ITEMS,
        metavar="N",
    )
    seed: int = option(0, "which documents --max-documents draws", minimum=0, maximum=MAX_SEED, metavar="S")
    progress: bool = option(True, "no progress bar", flag="--no-progress")


def cmd_tokenizer_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from posformer.data.bpe import sample, train_byte_bpe
    from posformer.data.documents import documents
    from posformer.hf.char_byte_tokenizers import EOD_TOKEN, tokenizer_files
    from posformer.utils.progress import progress_bar
    from posformer.utils.safe_write import make_dirs, write_text_atomic

    options = options_from_args(TokenizerTrainOptions, args)
    chosen = documents(options.data, options.text_field)
    total = None
    if options.max_documents is not None:
        total = sum(1 for _ in documents(options.data, options.text_field))
        chosen = sample(chosen, options.max_documents, total, options.seed)
        total = min(total, options.max_documents)
    read = progress_bar(chosen, total=total, desc="documents", unit="doc", disable=not options.progress)
    tokenizer = train_byte_bpe(read, options.vocab_size)
    out = make_dirs(Path(options.out))
    files = tokenizer_files(tokenizer, eos_token=EOD_TOKEN)
    for name, text in files.items():
        write_text_atomic(out / name, text)
    print(
        f"wrote {out}: {', '.join(files)}; byte-level BPE of {tokenizer.get_vocab_size():,} tokens "
        f"({EOD_TOKEN} is id {tokenizer.token_to_id(EOD_TOKEN)})"
    )
    return 0


TRAIN = Command(
    "train",
    help="train a byte-level BPE tokenizer on documents",
    description="Learn a byte-level BPE tokenizer (GPT-2's recipe, the `tokenizers` library) from documents given "
    "as data.train takes them, and write tokenizer.json and tokenizer_config.json, which AutoTokenizer loads and "
    "`posformer train --set data.tokenizer=DIR` uses. <|endoftext|> is its end-of-document (eos) token. The same "
    "documents give the same files, byte for byte.",
    epilog="Example: posformer tokenizer train --data corpus/ extra.jsonl --vocab-size 8192 --out tok",
    add_arguments=lambda parser: add_option_flags(parser, TokenizerTrainOptions),
    run=cmd_tokenizer_train,
)
COMMAND = Command(
    "tokenizer",
    help="tokenizers for your own data: train",
    description="Tokenizers for posformer train's data.tokenizer.",
    subcommands=(TRAIN,),
)
