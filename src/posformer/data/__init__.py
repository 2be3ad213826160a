"""Data: text corpora and tokenizers for language modelling."""
