"""Tasks: question answering (SQuAD v2) and its official metric."""
