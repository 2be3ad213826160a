"""Research workflows built on the library: each sub-package is one experiment (its settings, data, evaluation,
report); `posformer.cli` gives each its command. Shared between them, in this package's own modules: `runner` (owns
an output directory: results.json, results.md and figures, resumes), `layout` (its paths), `rows` (a row's initial
weights and training), `tables` (markdown tables), `corpus` (corpora and tokenizer), `presets`, `training_knobs` and
`row_knobs` (settings from a preset; the groups of knobs declared once), `passkey` (passkey retrieval prompts,
scoring, training mix), `memory_fit`. `reports` sits above every experiment (`posformer report`). No sub-package
imports another that imports it back (tests/test_package_layers.py)."""
