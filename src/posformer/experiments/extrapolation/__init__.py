"""Train short, test long: the length-extrapolation experiment behind `posformer extrapolate`.

| module | what |
|---|---|
| settings | the knobs, the presets (quick, cpu, bytes, gpu) and the model every row shares |
| evaluation | perplexity at a context length: non-overlapping and sliding protocols, losses per block |
| bootstrap | 95% percentile-bootstrap intervals of perplexities and of their paired ratios |
| experiment | training and evaluating each row, resumable (`run_extrapolation`) |
| report | results.md tables and ppl.png |
| command | the `posformer extrapolate` command (a `posformer.cli.command.Command`) |

The corpora and tokenizer (`experiments.corpus`), the output directory (`experiments.layout`, `experiments.runner`)
and the tables (`experiments.tables`) are shared with the other experiments.
"""
