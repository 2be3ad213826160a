"""Train short, test long: the length-extrapolation experiment behind `posformer extrapolate`.

| module | what |
|---|---|
| settings | the knobs, the presets (quick, cpu, bytes, gpu) and the model every row shares |
| data | the corpora and the byte-level BPE tokenizer |
| evaluation | perplexity at a context length: non-overlapping and sliding protocols, losses per block |
| bootstrap | 95% percentile-bootstrap intervals of perplexities and of their paired ratios |
| experiment | training and evaluating each row, resumable (`run_extrapolation`) |
| report | results.md tables and ppl.png |
| layout | where the results, the tokenizer and each row's run live in the output directory |
| command | the `posformer extrapolate` command (a `posformer.cli.command.Command`) |
"""
