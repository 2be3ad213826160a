"""The `posformer` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import sys

from posformer.cli_extrapolate import add_extrapolate_parser
from posformer.cli_qa import add_qa_parser
from posformer.cli_plot import add_plot_parser
from posformer.presets import preset_names

EPILOG = "Run `posformer COMMAND --help` for the options of each command."


def cmd_info(args: argparse.Namespace) -> int:
    from posformer.config import Config
    from posformer.summary import describe

    if (args.preset is None) == (args.config is None):
        raise SystemExit("posformer info: give exactly one of --preset NAME or --config FILE")
    cfg = Config.preset(args.preset) if args.preset else Config.load(args.config)
    print(describe(cfg, args.context))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from posformer.train import distributed
    from posformer.train.causal_lm import train_causal_lm
    from posformer.train.settings import load_run_settings

    overrides = args.set + ([f"trainer.seed={args.seed}"] if args.seed is not None else [])
    settings = load_run_settings(args.config, overrides)
    train_causal_lm(settings, args.output_dir, resume=args.resume, progress=not args.no_progress)
    distributed.shutdown()
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    import torch

    from posformer.loading import load_model, load_text_tokenizer

    if args.num_beams < 1:
        raise ValueError(f"--num-beams must be >= 1, got {args.num_beams}")
    model = load_model(args.model)
    tokenizer = load_text_tokenizer(args.model)
    prompt = torch.tensor([tokenizer.encode(args.prompt)])
    options = dict(max_new_tokens=args.max_new_tokens)
    if args.num_beams > 1:
        options["num_beams"] = args.num_beams
    elif args.temperature > 0:
        options.update(do_sample=True, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                       generator=torch.Generator().manual_seed(args.seed))
    out = model.generate(prompt, **options)[0].tolist()
    print(tokenizer.decode(out if model.cfg.arch == "decoder" else out[1:]))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from pathlib import Path

    from posformer.checkpoint import load_pretrained, save_pretrained
    from posformer.hf import from_hf, to_hf
    from posformer.hf.files import resolve
    from posformer.loading import copy_tokenizer_files

    if (args.from_hf is None) == (args.to_hf is None):
        raise ValueError("give exactly one of --from-hf DIR (Hugging Face -> posformer) or --to-hf DIR "
                         "(posformer -> Hugging Face)")
    out = Path(args.out)
    if args.from_hf is not None:
        source = resolve(args.from_hf)
        model = from_hf(source)
        save_pretrained(model, out)
    else:
        source = Path(args.to_hf)
        model = load_pretrained(source)
        to_hf(model, out)
    copied = copy_tokenizer_files(source, out, hf_only=args.to_hf is not None)
    print(f"wrote {out}: {model.cfg.hf_model_type or 'posformer'} model, {model.num_parameters():,} parameters"
          f"{'; tokenizer files: ' + ', '.join(copied) if copied else '; no tokenizer files'}")
    return 0


BENCHES = {"--generation": "generation", "--trainer": "trainer", "--qa": "qa"}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    chosen = [flag for flag in BENCHES if flag in args.rest]
    if len(chosen) > 1:
        raise ValueError(f"give at most one of {' and '.join(BENCHES)}")
    if chosen:
        bench = importlib.import_module(f"posformer.bench.{BENCHES[chosen[0]]}")
        return bench.main([arg for arg in args.rest if arg != chosen[0]])
    from posformer.bench.speed import main as speed_main

    return speed_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posformer",
        description="Build, train and study Transformers from interchangeable parts.",
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = sub.add_parser("info", help="summarise a model: layers, parameters, position encoding, FLOPs/token",
                          description="Print a model's layers, parameters per component, position encoding and "
                                      "FLOPs per token. Nothing is allocated, so large presets are fine.")
    info.add_argument("--preset", choices=preset_names(), help="a named configuration")
    info.add_argument("--config", help="a config file (.json, .yaml) written by Config.save")
    info.add_argument("--context", type=int, help="context length for the FLOPs count (default: max_positions)")
    info.set_defaults(func=cmd_info)

    train = sub.add_parser(
        "train", help="train a causal LM on text files (default: the ~2 minute demo on the shipped sample)",
        description="Train a causal language model with posformer's trainer: AdamW, warm-up schedules, gradient "
                    "accumulation and clipping, bf16/fp16, evaluation, a JSONL log, a loss-curve PNG, and "
                    "atomic checksummed checkpoints that --resume continues exactly. The run config (YAML) has "
                    "three sections, model (Config fields or preset), data and trainer; --set overrides any "
                    "field. Runs unchanged under `torchrun --nproc_per_node N` (DDP; trainer.parallel=fsdp "
                    "shards the model). With no options it trains the demo on the shipped Tiny Shakespeare sample.",
        epilog="Example: posformer train --config run.yaml --output-dir runs/x --set trainer.lr=1e-3 "
               "--set model.position=alibi",
    )
    train.add_argument("--config", help="run config, YAML or JSON (default: the demo settings)")
    train.add_argument("--output-dir", dest="output_dir", default="runs/lm",
                       help="where checkpoints, metrics.jsonl, loss.png and run_config.yaml go (default: runs/lm)")
    train.add_argument("--resume", action="store_true",
                       help="continue from the newest valid checkpoint in --output-dir (falls back past corrupt ones)")
    train.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="override one setting, e.g. trainer.steps=100, data.seq_len=64, model.position=alibi "
                            "(repeatable; values are YAML)")
    train.add_argument("--seed", type=int, help="the run's one seed: weights, data order, dropout (= --set trainer.seed=N)")
    train.add_argument("--no-progress", dest="no_progress", action="store_true", help="no progress bar")
    train.set_defaults(func=cmd_train)

    generate = sub.add_parser(
        "generate", help="continue a prompt with a posformer or Hugging Face checkpoint",
        description="Continue a prompt with a model directory: a posformer checkpoint (`posformer train`, "
                    "`posformer convert`) or a Hugging Face one (config.json + weights + tokenizer). Decoding "
                    "runs on the KV cache: sampling when --temperature > 0, greedy at 0, beam search with "
                    "--num-beams > 1. An encoder-decoder model (T5, Marian) reads the prompt as its input.",
    )
    generate.add_argument("--model", required=True, help="model directory (or a Hub id when online)")
    generate.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    generate.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=200)
    generate.add_argument("--num-beams", dest="num_beams", type=int, default=1,
                          help="beam search with this many beams (default: 1, no beam search)")
    generate.add_argument("--temperature", type=float, default=0.8, help="0 means greedy decoding (default: 0.8)")
    generate.add_argument("--top-k", dest="top_k", type=int, default=None, help="sample from the k likeliest tokens")
    generate.add_argument("--top-p", dest="top_p", type=float, default=None, help="nucleus sampling mass")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampler (default: 0)")
    generate.set_defaults(func=cmd_generate)

    convert = sub.add_parser(
        "convert", help="convert between Hugging Face and posformer checkpoints",
        description="--from-hf DIR: read a Hugging Face checkpoint (config.json + safetensors or .bin, sharded "
                    "or not) and write a posformer checkpoint. --to-hf DIR: write a posformer checkpoint as a "
                    "Hugging Face one that transformers' from_pretrained loads. Tokenizer files are copied.",
    )
    convert.add_argument("--from-hf", dest="from_hf", metavar="DIR", help="Hugging Face checkpoint dir (or Hub id)")
    convert.add_argument("--to-hf", dest="to_hf", metavar="DIR", help="posformer checkpoint dir")
    convert.add_argument("--out", required=True, metavar="DIR", help="output directory (created if needed)")
    convert.set_defaults(func=cmd_convert)

    bench = sub.add_parser("bench", help="speed benchmark against Hugging Face (run `posformer bench --help`; "
                                         "`posformer bench --generation --help` for generation speed, "
                                         "`posformer bench --trainer --help` for the trainer's, "
                                         "`posformer bench --qa --help` for extractive QA training)",
                           description="Forward and training tokens/s of posformer against Hugging Face "
                                       "LlamaForCausalLM on the identical config; with --generation, greedy "
                                       "generation tokens/s against GPT2LMHeadModel.generate; with --trainer, "
                                       "training tokens/s of posformer's Trainer against a plain PyTorch loop; "
                                       "with --qa, SQuAD v2 fine-tuning of all-MiniLM-L6-v2 (tokens/s, EM, F1) against "
                                       "BertForQuestionAnswering trained identically. "
                                       "Options are passed on.",
                           add_help=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    bench.set_defaults(func=cmd_bench)
    add_qa_parser(sub)
    add_extrapolate_parser(sub)
    add_plot_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every later argument belongs to the benchmark's own parser, options included
        args = argparse.Namespace(command="bench", func=cmd_bench, rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"posformer {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
