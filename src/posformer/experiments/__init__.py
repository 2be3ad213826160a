"""Research workflows built on the library: each sub-package is one experiment (its settings, data, evaluation,
report and the layout of its output directory); `posformer.cli` gives each its command."""
