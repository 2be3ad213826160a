"""`posformer convert SOURCE --to hf|posformer --out DIR`: a posformer model -> a Hugging Face checkpoint, and back.

The older spelling, `--to-hf SOURCE --out DIR` and `--from-hf SOURCE --out DIR`, names the source by the flag of
the direction; it still works."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.options import option

DIRECTIONS = {"hf": "posformer -> Hugging Face", "posformer": "Hugging Face -> posformer"}  # --to KIND


@dataclass(kw_only=True)
class ConvertOptions:
    """The options of `posformer convert`: SOURCE with --to, or the older --to-hf SOURCE / --from-hf SOURCE."""

    source: str | None = option(
        None,
        "what to convert: for --to hf a posformer model dir, a training run (its newest checkpoint) or a checkpoint "
        "folder; for --to posformer a Hugging Face checkpoint dir or Hub id",
        flag="SOURCE",
    )
    to: str | None = option(
        None, "the kind of checkpoint to write: hf (posformer -> Hugging Face) or posformer (back)", choices=DIRECTIONS
    )
    out: str = option(help="output directory (created if needed)", metavar="DIR")
    from_hf: str | None = option(None, "the older spelling of SOURCE --to posformer", metavar="SOURCE")
    to_hf: str | None = option(None, "the older spelling of SOURCE --to hf", metavar="SOURCE")
    hf_model_type: str | None = option(
        None,
        "with --to hf: the Hugging Face family to write (default: the model's own, else the first that writes it "
        "and reads it back the same: llama, gpt2, bert, t5, ...)",
        metavar="TYPE",
    )
    rope_parameters: bool = option(
        False,
        "with --to hf: write RoPE settings in transformers v5's rope_parameters form (default: v4's rope_theta and "
        "rope_scaling, which transformers 4.x reads)",
    )
    transformers_version: str | None = option(
        None,
        "with --to hf: the transformers version the checkpoint is for, e.g. 4.57.6 or 5.24.0 (where the two read a "
        "config key differently, as T5's head scaling, it is written in that version's words; default: the "
        "installed transformers, else the newest)",
        metavar="VERSION",
    )


def cmd_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from posformer.checkpoints.native import save_pretrained
    from posformer.hf import to_hf
    from posformer.hf.stray_bos import stray_bos
    from posformer.loading import copy_tokenizer_files, load_from
    from posformer.train.run_record import training_run

    options = options_from_args(ConvertOptions, args)
    target, source_path = conversion(options)
    for name, value in (
        ("--hf-model-type", options.hf_model_type),
        ("--transformers-version", options.transformers_version),
    ):
        if value is not None and target != "hf":  # said in the spelling the command line used
            raise ValueError(f"{name} applies to {'--to hf' if options.source is not None else '--to-hf'} only")
    out = Path(options.out)
    if target == "posformer":
        model, source = load_from(source_path, kind="hf")
        copied = copy_tokenizer_files(source, out)  # before the model: its card says how to load the tokenizer
        save_pretrained(model, out)
        written = "posformer"
    else:
        model, source = load_from(Path(source_path), kind="posformer")
        if stray_bos(model.cfg, source):
            print(f"bos_token_id={model.cfg.bos_token_id} left out: the model's tokenizer has no such BOS token")
            model.cfg = model.cfg.replace(bos_token_id=None)
        copied = copy_tokenizer_files(source, out, hf_only=True)
        to_hf(
            model,
            out,
            rope_parameters=options.rope_parameters,
            hf_model_type=options.hf_model_type,
            transformers_version=options.transformers_version,
            run=training_run(source),
        )
        written = json.loads((out / "config.json").read_text())["model_type"]
    print(
        f"wrote {out}: {written} model, {model.num_parameters():,} parameters"
        f"{'; tokenizer files: ' + ', '.join(copied) if copied else '; no tokenizer files'}"
    )
    return 0


def conversion(options: ConvertOptions) -> tuple[str, str]:
    """(the kind to write, "hf" or "posformer"; the source) from SOURCE --to KIND or the older --to-hf SOURCE /
    --from-hf SOURCE; a ValueError naming the flags when they give none, or more than one, or mix the two."""
    older = {"hf": options.to_hf, "posformer": options.from_hf}
    given = {kind: path for kind, path in older.items() if path is not None}
    if options.source is not None and given:
        raise ValueError("give SOURCE --to hf|posformer, or the older --to-hf SOURCE / --from-hf SOURCE, not both")
    if options.source is not None:
        if options.to is None:
            raise ValueError(
                f"convert {options.source}: give --to hf ({DIRECTIONS['hf']}) or --to posformer "
                f"({DIRECTIONS['posformer']})"
            )
        return options.to, options.source
    if options.to is not None:
        raise ValueError(
            f"--to {options.to}: give the SOURCE to convert before it (posformer convert SOURCE --to "
            f"{options.to} --out DIR)"
        )
    if len(given) != 1:
        raise ValueError(
            "give what to convert: posformer convert SOURCE --to hf|posformer --out DIR (or, in the older spelling, "
            "exactly one of --from-hf SOURCE or --to-hf SOURCE)"
        )
    return next(iter(given.items()))


COMMAND = Command(
    "convert",
    help="convert between Hugging Face and posformer checkpoints",
    description="SOURCE --to hf --out DIR: write a posformer model (a model dir, a training run or one of its "
    "checkpoints) as a Hugging Face checkpoint that transformers' from_pretrained loads, in the family "
    "--hf-model-type names or the one inferred from the config. SOURCE --to posformer --out DIR: read a Hugging Face "
    "checkpoint (config.json + safetensors or .bin, sharded or not; a dir or a Hub id) and write a posformer "
    "checkpoint. Tokenizer files are copied. The older spelling, --to-hf SOURCE / --from-hf SOURCE, still works.",
    epilog="Examples: posformer convert runs/x --to hf --out exported; posformer convert hf_llama --to posformer "
    "--out ours",
    add_arguments=lambda parser: add_option_flags(
        parser,
        ConvertOptions,
        only=("source", "to", "out", "hf_model_type", "rope_parameters", "transformers_version", "to_hf", "from_hf"),
    ),
    run=cmd_convert,
)
