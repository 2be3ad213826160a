"""Shared fixtures: deterministic seeds and tiny configs."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from hf_gaps import mark_gaps


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_gaps(items)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny models run far faster on one intra-op thread on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def tiny(arch: str = "decoder", **overrides) -> pf.Config:
    """A tiny config for fast tests; any field can be overridden."""
    fields = dict(
        arch=arch,
        vocab_size=61,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        max_positions=64,
        decoder_start_token_id=0 if arch == "encoder_decoder" else None,
    )
    fields.update(overrides)
    return pf.Config(**fields)
