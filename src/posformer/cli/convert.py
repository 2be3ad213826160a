"""`posformer convert`: Hugging Face checkpoint -> posformer checkpoint, and back."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.options import option


@dataclass
class ConvertOptions:
    """The options of `posformer convert`: exactly one of from_hf and to_hf."""

    out: str = option(help="output directory (created if needed)", metavar="DIR")
    from_hf: str | None = option(None, "Hugging Face checkpoint dir (or Hub id)", metavar="DIR")
    to_hf: str | None = option(
        None, "a posformer model dir, a training run (its newest checkpoint) or a checkpoint folder", metavar="DIR"
    )
    hf_model_type: str | None = option(
        None,
        "with --to-hf: the Hugging Face family to write (default: the model's own, else the first that writes it "
        "and reads it back the same: llama, gpt2, bert, t5, ...)",
        metavar="TYPE",
    )
    rope_parameters: bool = option(
        False,
        "with --to-hf: write RoPE settings in transformers v5's rope_parameters form (default: v4's rope_theta and "
        "rope_scaling, which transformers 4.x reads)",
    )
    transformers_version: str | None = option(
        None,
        "with --to-hf: the transformers version the checkpoint is for, e.g. 4.57.6 or 5.24.0 (where the two read a "
        "config key differently, as T5's head scaling, it is written in that version's words; default: the "
        "installed transformers, else the newest)",
        metavar="VERSION",
    )


def cmd_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from posformer.checkpoints.native import save_pretrained
    from posformer.hf import to_hf
    from posformer.loading import copy_tokenizer_files, load_from

    options = options_from_args(ConvertOptions, args)
    if (options.from_hf is None) == (options.to_hf is None):
        raise ValueError(
            "give exactly one of --from-hf DIR (Hugging Face -> posformer) or --to-hf DIR (posformer -> Hugging Face)"
        )
    for name, value in (
        ("--hf-model-type", options.hf_model_type),
        ("--transformers-version", options.transformers_version),
    ):
        if value is not None and options.to_hf is None:
            raise ValueError(f"{name} applies to --to-hf only")
    out = Path(options.out)
    if options.from_hf is not None:
        model, source = load_from(options.from_hf, kind="hf")
        save_pretrained(model, out)
        written = "posformer"
    else:
        model, source = load_from(Path(options.to_hf), kind="posformer")
        to_hf(
            model,
            out,
            rope_parameters=options.rope_parameters,
            hf_model_type=options.hf_model_type,
            transformers_version=options.transformers_version,
        )
        written = json.loads((out / "config.json").read_text())["model_type"]
    copied = copy_tokenizer_files(source, out, hf_only=options.to_hf is not None)
    print(
        f"wrote {out}: {written} model, {model.num_parameters():,} parameters"
        f"{'; tokenizer files: ' + ', '.join(copied) if copied else '; no tokenizer files'}"
    )
    return 0


COMMAND = Command(
    "convert",
    help="convert between Hugging Face and posformer checkpoints",
    description="--from-hf DIR: read a Hugging Face checkpoint (config.json + safetensors or .bin, sharded "
    "or not) and write a posformer checkpoint. --to-hf DIR: write a posformer model (a model dir, a training "
    "run or one of its checkpoints) as a Hugging Face checkpoint that transformers' from_pretrained loads, in "
    "the family --hf-model-type names or the one inferred from the config. Tokenizer files are copied.",
    add_arguments=lambda parser: add_option_flags(
        parser,
        ConvertOptions,
        only=("from_hf", "to_hf", "hf_model_type", "rope_parameters", "transformers_version", "out"),
    ),
    run=cmd_convert,
)
