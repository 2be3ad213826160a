"""Benchmarks of posformer models."""
