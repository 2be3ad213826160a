"""A RULER-style synthetic long-context suite (Hsieh et al. 2024, "RULER: What's the Real Context Size of Your
Long-Context Language Models?"), generated on the fly, deterministic under a seed, sized for small models:
`posformer longeval` runs it on a checkpoint; `posformer extend` can score it with `grid.suite_grid`.

| module | what |
|---|---|
| items | the keys, values, variable names and words prompts are made of; the train / eval split by hash |
| draws | the random draws, from one `torch.Generator` |
| haystacks | noise and book text, the places a needle may go; the books of each split |
| prompt | `SuitePrompt`, the `SuiteTask` protocol, putting a prompt together to an exact length |
| needles | single, multi-key, multi-value and multi-query needles (`NeedleTask`) |
| variables | variable tracking (`VariableTracking`) |
| word_lists | common and frequent word extraction (`CommonWords`, `FrequentWords`) |
| task_names | the tasks' names (`TASK_NAMES`), read without torch by the commands' `--help` |
| tasks | the tasks by name (`TASKS`), the checks of a request, `training_prompt` |
| mix | `SuiteMix`: training batches with suite prompts mixed in |
| grid | `suite_grid`: exact match by task, length and depth; means and chance levels |
| effective | the effective length and its rule |
| settings, run, report | the `posformer longeval` command's settings, run and results.md |
"""
