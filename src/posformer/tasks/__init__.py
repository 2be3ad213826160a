"""What a model is trained to do: the causal LM (`posformer train`) and SQuAD v2 question answering
(`posformer qa`, the subpackage `qa`: windows, the seq2seq and span predictors, the evaluator, the official metric,
the job)."""
