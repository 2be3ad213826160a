"""`posformer extrapolate`: which position encoding lets a model trained at length L read 16L?"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.experiment_options import ExperimentRunOptions, add_experiment_arguments, run_seeds
from posformer.experiments.extrapolation.settings import PRESETS
from posformer.experiments.synthetic.generators import TASKS
from posformer.utils.options import option

DESCRIPTION = """\
Train short, test long (the length-extrapolation benchmark of Press, Smith & Lewis 2022, ALiBi).

What is compared: one small pre-norm causal LM per position encoding (default rows: none,
sinusoidal, learned, rope, alibi, t5, shaw, fire, kerple, xpos), trained at length L with the
same tokenizer (byte-level BPE), the same batches in the same order, the same steps and cosine
schedule, and the same initial weights for every tensor the rows share; only the position
encoding differs. Each row is evaluated at L, 2L, 4L, 8L and 16L on the same held-out tokens.
The rope row is also evaluated with eval-time RoPE scalings (rope+linear (PI), rope+ntk,
rope+dynamic, rope+yarn; factor eval_len / L). 'learned' has a table of exactly L positions:
n/a beyond it.

Presets (every knob can be overridden by its flag or by --set KEY=VALUE):
  quick  tinyshakespeare sample shipped with the package, L=32, d_model 64, 2 layers,
         200 steps, one CPU thread: a smoke run of about a minute (5 at most).
  cpu    Gutenberg books (3 held out) + WikiText-2 test, L=128, d_model 192, 4 layers,
         300 steps of 16 x 128 tokens, one CPU thread: about 45 minutes, evaluation
         included (on 2 idle cores --set threads=2 is faster).
  bytes  Gutenberg + WikiText-2 as bytes (vocab 257), L=64, d_model 128, 4 layers, 2000 steps of
         32 x 64 bytes, two threads: models that read their context (far below the unigram
         perplexity, which results.md reports); 98,304 eval bytes per set. About 4 minutes a row.
  gpu    Gutenberg + WikiText-2, L=512, ~100M parameters (d_model 768, 12 layers, vocab 16384),
         5000 steps of 32 x 512 tokens, bf16 on CUDA.
  retrieval  which encodings use the context past L: the passkey source recipe of docs/longeval.md
         (L=128, d_model 128, 4 layers, vocab 2048 with digits split, smeared keys, 600 steps of
         packed copies, then 30% passkey prompts; 6000 steps) for none, rope (+yarn at eval time),
         alibi, t5, fire, kerple, fox and stick_breaking; each row scored at L, 2L, 4L and 8L on
         passkey exact match by depth (keys within the last L tokens and further back apart), the
         suite's single needles and perplexity; past L a row counts only if it retrieves at L
         (passkey >= 0.9). About 23 minutes of training a RoPE row on 2 threads.

Protocols: nonoverlapping (default): the eval stream is cut into consecutive chunks of
eval_len tokens; every predicted token counts. sliding (--stride S, default L/2): windows of
eval_len tokens every S tokens, each scoring only its last S tokens (the first window all),
as the Hugging Face perplexity recipe; S = eval_len equals nonoverlapping. Each held-out
book is its own stream (a continuous run from its middle; chunks never cross books),
aggregated token-weighted; the same eval_tokens tokens (a multiple of the longest eval
length) serve every length and row. The ratios carry 95% intervals from a paired bootstrap
over blocks of the longest eval length (the same text at every length).

Long lengths: windows past eval_batch_tokens are scored one at a time, the vocabulary logits a chunk of rows at
a time, and a bias by blocks of queries: memory grows linearly with the length. Before any work, the
memory of each row's training step and of each evaluation length is estimated and compared with what the device
has free (`experiments.memory_fit`): a length that would not fit is refused up front, named with its estimate.
A progress bar counts the tokens each row's evaluation has scored.

--set passkey_fraction=F replaces a fraction F of the training windows by passkey prompts of
L tokens, so the models learn retrieval that `posformer extend` then tests at longer lengths.

Tasks (--task copy|reverse|sort|addition|parity|passkey; after Kazemnejad et al. 2023 and the
passkey retrieval of Mohtashami & Jaggi 2023): one small decoder per encoding (default rows none,
t5, alibi, rope, sinusoidal) trained on examples of lengths 1..L, then exact-match accuracy of
greedy decoding on held-out examples at L, 1.25L, 1.5L, 2L, 3L and 4L (results.md with the mean
reciprocal rank beside the paper's, results.json, accuracy.png). Presets: quick (L=8, 500 steps,
~10 s a row) and cpu (L=8, 4 layers, 3000 steps, ~2 minutes a row).

Outputs in --output-dir: results.md (perplexity and ppl(kL)/ppl(L) tables per eval set),
results.json (every number, the resolved config, held-out books, wall times, versions),
ppl.png (perplexity against eval length, 95% intervals), tokenizer/, and rows/ROW/ (a Trainer run dir:
`posformer generate --model OUTPUT/rows/rope` works). results.json is updated after each
row: re-running into the same dir (or --resume) skips recorded rows and resumes a
half-trained one from its checkpoint; a different configuration is refused.

Seeds (--seeds N): one seed orders no encodings. Each seed is then a whole run in OUTPUT/seed-S/ (its own
weights, data order and draws, shared by its rows), and OUTPUT/results.md gives every measure as its mean over
seeds with a 95% Student-t interval and compares every pair seed by seed: a pair is ordered only when the
interval of its per-seed difference excludes 0. `posformer report OUTPUT` prints it again, or writes it into
a docs page. Seeds can run side by side, one process each (`--seeds 0,` and `--seeds 1,` into one OUTPUT).
"""

EPILOG = (
    "Example: posformer extrapolate --preset cpu --output-dir runs/extrapolate "
    "--positions rope,alibi,learned --set eval_tokens=8192"
)


@dataclass(kw_only=True)
class ExtrapolateCommandOptions(ExperimentRunOptions):
    """How `posformer extrapolate` runs; the experiment's knobs are `ExtrapolationSettings` (`TaskSettings` with
    --task)."""

    output_dir: str = option(help="results and the rows' runs")
    preset: str = option("quick", "size and budget (--task has quick and cpu)", choices=tuple(PRESETS))
    task: str | None = option(
        None,
        "a synthetic task instead of language modelling: exact-match accuracy by task length (train_len / eval_lens "
        "count the task's symbols, digits, bits or passkey prompt tokens)",
        choices=tuple(TASKS),
    )
    resume: bool = option(False, "continue the run in --output-dir (also what re-running into it does)")


def flag_keys(settings_class: type) -> list[str]:
    """The knobs of `settings_class` that have a flag of their own (the others: `--set KNOB=VALUE`)."""
    from posformer.utils.options import options

    return [opt.name for opt in options(settings_class) if opt.spec.flag is not False]


def _overrides(args: argparse.Namespace, keys: list[str], example: str) -> dict:
    """The flags among `keys` that were given, then --set KEY=VALUE (YAML values); "a,b" lists split."""
    from posformer.utils.user_files import parse_yaml
    from posformer.utils.validation import excerpt

    overrides = {key: getattr(args, key) for key in keys if getattr(args, key, None) is not None}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {excerpt(item)}: expected KEY=VALUE, e.g. {example}")
        value = parse_yaml(raw, f"--set {excerpt(item)}: the value")
        overrides[key.strip()] = _ints(value) if key.strip() == "eval_lens" and isinstance(value, str) else value
    return overrides


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--set eval_lens={text!r}: expected comma-separated integers") from None


def settings_from_args(args: argparse.Namespace):
    """Preset, then flags, then --set KEY=VALUE (YAML values) -> validated settings."""
    from posformer.experiments.extrapolation.settings import ExtrapolationSettings

    overrides = _overrides(args, flag_keys(ExtrapolationSettings), "eval_tokens=8192 or steps=200")
    return ExtrapolationSettings.preset(args.preset, **overrides).with_precision_resolved()


def task_settings_from_args(args: argparse.Namespace):
    """--task: the task preset, then the flags that apply to tasks, then --set KEY=VALUE."""
    from dataclasses import fields

    from posformer.experiments.extrapolation.settings import ExtrapolationSettings
    from posformer.experiments.synthetic.settings import TaskSettings
    from posformer.utils.options import flag_spelling
    from posformer.utils.validation import excerpt

    task_knobs = {f.name for f in fields(TaskSettings)}
    keys = flag_keys(ExtrapolationSettings)
    ignored = [flag_spelling(key) for key in keys if key not in task_knobs and getattr(args, key) is not None]
    if ignored:
        raise ValueError(f"--task {args.task}: {', '.join(ignored)} apply to the language-model benchmark only")
    overrides = _overrides(args, [key for key in keys if key in task_knobs], "steps=200 or eval_examples=100")
    if "task" in overrides:
        raise ValueError(f"--set task={excerpt(overrides['task'])}: expected the task given by --task only")
    return TaskSettings.preset(args.preset, task=args.task, **overrides).with_precision_resolved()


def cmd_task(args: argparse.Namespace) -> int:
    from posformer.experiments.layout import ExperimentLayout
    from posformer.experiments.synthetic import seed_report
    from posformer.experiments.synthetic.experiment import run_tasks
    from posformer.experiments.synthetic.report import markdown

    settings = task_settings_from_args(args)
    root = ExperimentLayout(args.output_dir).root
    if args.seeds is None:
        print("\n" + markdown(run_tasks(settings, args.output_dir, progress=args.progress)))
        print(f"written: {root / 'results.md'}, {root / 'results.json'}, {root / 'accuracy.png'}")
        return 0

    def run_one(seeded, directory):
        return run_tasks(seeded, directory, progress=args.progress)

    return run_seeds(args, settings, root, run_one, seed_report.markdown, "tasks")


def cmd_extrapolate(args: argparse.Namespace) -> int:
    if args.task is not None:
        return cmd_task(args)
    from posformer.experiments.extrapolation import seed_report
    from posformer.experiments.extrapolation.experiment import run_extrapolation
    from posformer.experiments.extrapolation.report import markdown
    from posformer.experiments.layout import ExperimentLayout

    settings = settings_from_args(args)
    layout = ExperimentLayout(args.output_dir)
    if args.seeds is None:
        print("\n" + markdown(run_extrapolation(settings, args.output_dir, progress=args.progress)))
        print(f"written: {', '.join(str(path) for path in (layout.results_md, layout.results_json, layout.plot_png))}")
        return 0

    def run_one(seeded, directory):
        return run_extrapolation(seeded, directory, progress=args.progress)

    return run_seeds(args, settings, layout.root, run_one, seed_report.markdown, "extrapolation")


def add_extrapolate_arguments(parser: argparse.ArgumentParser) -> None:
    from posformer.experiments.extrapolation.settings import ExtrapolationSettings

    examples = 'e.g. --set held_out=[emma.txt] --set wikitext=false --set "position_params={fire: {init_L: 128}}"'
    add_experiment_arguments(parser, ExtrapolateCommandOptions, ExtrapolationSettings, examples)


COMMAND = Command(
    "extrapolate",
    help="train short, test long: perplexity of each position encoding at 1-16x the training length",
    description=DESCRIPTION,
    epilog=EPILOG,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=add_extrapolate_arguments,
    run=cmd_extrapolate,
)
