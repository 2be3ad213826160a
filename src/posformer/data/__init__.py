"""Data: text corpora and tokenizers for language modelling, and SQuAD-style QA data (`squad`)."""
