"""`posformer bench --qa`: QA fine-tuning of posformer against Hugging Face, trained identically in one run.

| module | what |
|---|---|
| span | extractive QA (SQuAD v2) against `BertForQuestionAnswering` |
| seq2seq | generative QA against HF's `EncoderDecoderModel` (BERT2BERT) |
| seq2seq_models | the two BERT2BERT models of the generative benchmark |
| setup | what the extractive benchmark gives both sides alike: questions, batches, models |
| compare | what both share: two models trained in lockstep on the same batches, timed, then evaluated |
"""
