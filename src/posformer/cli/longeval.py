"""`posformer longeval`: a RULER-style synthetic long-context suite on any posformer or Hugging Face checkpoint."""

from __future__ import annotations

import argparse

from posformer.cli.command import Command

DESCRIPTION = """\
Score a causal LM on a synthetic long-context suite after RULER (Hsieh et al. 2024): prompts of exactly each
--lengths tokens, generated on the fly from --seed (the same seed, tokenizer and settings give the same prompts),
drawn from the evaluation split (keys, values, names and words that no training prompt of the suite uses; book
text from the held-out books of `posformer extrapolate`).

Tasks (--tasks; all by default):
  single_noise   one needle " The key of lake is 41825." in noise; " The key of lake is" -> " 41825"
  single_number  the same in book text
  single_word    a word value in book text
  single_uuid    an 8-hex-digit value (3fa9-c2e1) in book text
  multikey       4 needles with distinct keys in book text, one asked (3 distractors)
  multivalue     3 needles of one key; " The keys of lake are" -> all 3 values, in order
  multiquery     4 needles; 2 keys asked at once, their values in the order asked
  vt             variable tracking: 2 chains " VAR QX = 41825." " VAR RT = QX." ... in noise; the variables
                 holding the value asked, in order
  cwe            common words: 3 words occurring 3x as often as the rest of a list; in order of appearance
  fwe            frequent words: counts floor(M / rank^2); the top 3, most frequent first
The needle of single_* and multikey sits at each --depths (0: the start of the haystack, 1: its end); the other
tasks place their items at random depths. A length below what a task's prompt needs with the model's tokenizer
is refused with the task and length named; so is a length past a learned position table.

Scoring: exact match of greedy decoding, from one teacher-forced pass (the argmax agrees with every answer token).
Chance: the exact-match rate of a uniform guess among the prompt's candidates (its needle values, variables or
listed words, in order): 1/4 for multikey, about 1e-5 for cwe; a single needle's value is the only one in its
prompt, so its guess is among every value of its kind (1/90,000 for a 5-digit number). The effective length:
the longest length up to which the mean over tasks exceeds --threshold at every length (RULER's rule and
threshold, 0.856), or with --reference-length L a fraction --threshold of the model's own mean at L (small models
that never reach 0.856).

Outputs in --output-dir, written after each task: results.json (every cell: exact, answer tokens right, chance;
means; the effective length; the settings) and results.md (task x length, chance, mean, effective length, depth
tables). A progress bar counts the tokens scored. docs/longeval.md shows a prompt of each task.
"""

EPILOG = (
    "Example: posformer longeval runs/x/rows/rope --lengths 128,256,512,1k --tasks single_noise,multikey,vt "
    "--trials 50 --reference-length 128 --output-dir runs/longeval"
)


def add_longeval_arguments(parser: argparse.ArgumentParser) -> None:
    from posformer.cli.option_flags import add_option_flags
    from posformer.experiments.longeval.settings import LongevalSettings

    add_option_flags(parser, LongevalSettings)


def cmd_longeval(args: argparse.Namespace) -> int:
    from posformer.cli.option_flags import options_from_args
    from posformer.experiments.longeval.report import markdown
    from posformer.experiments.longeval.run import run_longeval
    from posformer.experiments.longeval.settings import LongevalSettings

    settings = options_from_args(LongevalSettings, args)
    results = run_longeval(settings)
    print("\n" + markdown(results))
    print(f"written: {settings.output_dir}/results.md, {settings.output_dir}/results.json")
    return 0


COMMAND = Command(
    "longeval",
    help="a RULER-style long-context suite (needles, variable tracking, word counts) on any checkpoint",
    description=DESCRIPTION,
    epilog=EPILOG,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=add_longeval_arguments,
    run=cmd_longeval,
)
