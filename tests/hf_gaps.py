"""What the Hugging Face parity suite does not yet pass under transformers 5.x.

The parity suite (tests/hf) runs against two oracles: transformers 4.57.6 (`make test`'s .venv) and the newest
5.x (.venv-hf5, `make test-hf5`). Under 5.x the tests listed here fail today (issue 40's list of families still to
map by what transformers 5 writes; none is left). `mark_gaps` (called by tests/conftest.py) marks each a strict
expected failure, so the suite says at once when one starts to pass (and must leave this list) and fails on any
other test that breaks.
"""

from __future__ import annotations

import pytest

from hf_oracle import ORACLE, TRANSFORMERS_5

NOT_YET_UNDER_5: dict[str, str] = {}  # a test id, or the start of several (its parametrisations) -> why


def mark_gaps(items: list[pytest.Item]) -> None:
    """Mark the tests of `NOT_YET_UNDER_5` strict expected failures when the oracle is transformers 5.x."""
    if not TRANSFORMERS_5:
        return
    for item in items:
        name = item.nodeid.removeprefix("tests/hf/")
        gap = next((why for test, why in NOT_YET_UNDER_5.items() if name.startswith(test)), None)
        if gap is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"issue 40, not yet under {ORACLE}: {gap}"))
