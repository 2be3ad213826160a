"""Context extension: `posformer extend` fine-tunes a trained RoPE model at a longer length with PI, NTK, YaRN,
dynamic YaRN or LongRoPE scaling, runs the training-free RoPE variants with a piecewise distance (ReRoPE,
Self-Extend, dual chunk attention, StreamingLLM), drops RoPE and recalibrates at the trained length (DroPE), and
measures perplexity by length, passkey retrieval and the long-context suite before and after.

| module | what |
|---|---|
| methods | the methods' position settings, and a model with new position settings and the same weights |
| longrope | LongRoPE's evolutionary search of one rescale factor per rotated pair |
| source | the trained run: model, tokenizer, training length, training and evaluation text |
| settings | the knobs and the presets (quick, cpu) |
| experiment | per method: eval-time scaling, fine-tune, scoring; resumable (`run_extend`) |
| report | results.md tables |
| figure | ppl.png, passkey.png, suite.png and effective_length.png |
| command | the `posformer extend` command |

Passkey prompts, their scoring on a length x depth grid and the passkey training mix live in
`posformer.experiments.passkey`, shared with `posformer extrapolate` (its `passkey_fraction`).
"""
