"""Research workflows built on the library: each sub-package is one experiment (its settings, data, evaluation,
report and the layout of its output directory); `posformer.cli` gives each its command. Shared between them:
`presets` (settings from a preset and overrides) and `passkey` (passkey retrieval prompts, scoring, training
mix)."""
