"""The synthetic tasks of `posformer extrapolate --task` (copy, reverse, sort, ...): train one small decoder per
position encoding at short lengths and measure exact match at longer ones. Not to be confused with
`posformer.tasks`, what a model is trained to do (causal LM, QA)."""
