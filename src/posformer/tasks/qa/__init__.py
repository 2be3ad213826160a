"""SQuAD v2 question answering, the seed job (`posformer qa`): Hugging Face's `run_qa.py` (span head) and
`run_seq2seq_qa.py` (seq2seq head) as library code.

| module | what |
|---|---|
| job | the job behind `qa train` and `qa eval`: options, data, model, training, evaluation |
| models | the default pretrained start, any checkpoint loaded with its QA head, tokenizer files |
| span | extractive QA over doc_stride windows (run_qa.py's logic) |
| extractive | the span head's training tensors and batched prediction |
| seq2seq | generative (T5-style) QA: tokenizer, scratch model, batches, prediction |
| windows | generative QA over long contexts, with doc_stride windows |
| predictor | what every predictor shares: bound to its questions, it answers them with a model |
| null_answers | questions without an answer: null training windows, the calibrated null threshold |
| evaluation | predictions, best non-empty answers and null odds, the official report |
| squad_metric | the official SQuAD v2.0 evaluation (exact match, F1, HasAns/NoAns, best thresholds) |
| feature_batches | deterministic, resumable, shardable batches of precomputed feature rows |
| resume | `qa train --resume`: which options a resumed run applies or refuses |
| ask | `qa ask`: ask a trained model about a text |
"""
