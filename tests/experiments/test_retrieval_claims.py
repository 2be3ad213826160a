"""The paired retrieval claims of `posformer extend`'s report: hits regrouped key by key, the paired bootstrap
interval of a difference in exact match, and the table's cells."""

from __future__ import annotations

import pytest
import torch

from posformer.experiments.extension.retrieval_claims import difference_cell, hits_by_key, retrieval_claims_table
from posformer.experiments.extrapolation.bootstrap import difference_interval


def _grid(hits_by_depth: dict[str, list[int] | None]) -> dict:
    return {"128": {d: None if h is None else {"exact": sum(h) / len(h), "digits": 0.0, "hits": h}
                    for d, h in hits_by_depth.items()}}  # fmt: skip


def test_hits_are_regrouped_key_by_key_over_the_depths_that_fit() -> None:
    grid = _grid({"0.0": [1, 0, 1], "0.5": None, "1.0": [0, 0, 1]})
    assert hits_by_key(grid, 128) == [[1, 0], [0, 0], [1, 1]]
    assert hits_by_key(_grid({"0.0": None}), 128) is None
    # beyond 64 tokens back: (1 - d) 128 > 64 holds at depth 0 only
    assert hits_by_key(grid, 128, farther_than=64) == [[1], [0], [1]]
    assert hits_by_key(grid, 128, farther_than=128) is None


def test_the_interval_holds_the_difference_and_is_a_point_when_every_resample_agrees() -> None:
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(40, 5, generator=g) < 0.7).int().tolist()
    b = (torch.rand(40, 5, generator=g) < 0.3).int().tolist()
    low, high = difference_interval(a, b)
    difference = torch.tensor(a).float().mean() - torch.tensor(b).float().mean()
    assert low < difference < high and 0 < low
    assert difference_interval(a, a) == (0.0, 0.0)  # paired: the same keys on both sides every resample
    assert difference_interval([[1, 1]] * 4, [[0, 1]] * 4) == pytest.approx((0.5, 0.5))


def test_a_difference_the_same_for_every_key_has_a_point_interval_whatever_the_keys_difficulty() -> None:
    hard_or_easy = [[k % 2] * 4 + [0] for k in range(40)]  # b finds half the keys at 4 of 5 depths, half nowhere
    better = [row[:4] + [1] for row in hard_or_easy]  # a finds each key at one depth more
    assert difference_interval(better, hard_or_easy) == pytest.approx((0.2, 0.2))
    low, high = difference_interval(hard_or_easy, [[0] * 5] * 40)  # differences that vary by key spread
    assert low < 0.4 < high


def test_mismatched_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="paired scores of shapes"):
        difference_interval([[1, 0]], [[1, 0, 1]])


def test_the_table_reads_each_claim_whose_rows_ran() -> None:
    results = {
        "config": {"passkey_lengths": [128], "train_len": 128},
        "rows": {
            "source": {"passkey": _grid({"0.0": [1, 0, 0, 0], "1.0": [1, 0, 0, 1]})},
            "self_extend": {"passkey": _grid({"0.0": [1, 1, 1, 0], "1.0": [1, 1, 0, 1]})},
            "yarn": {"ppl": {}},
        },
    }
    table = retrieval_claims_table(results)
    assert table is not None and "self_extend - source" in table and "+0.38 [" in table
    assert "yarn+ft" not in table  # its rows did not run
    assert difference_cell(None, [[1]]) == "n/a" and difference_cell([[1, 1]], [[0, 1]]) == "+0.50"
    results["config"]["train_len"] = 64
    assert "+0.50 [" in retrieval_claims_table(results, beyond_train_len=True)  # depth 0 alone: 3 of 4 against 1
    assert retrieval_claims_table({"config": {"passkey_lengths": [128], "train_len": 64}, "rows": {}}) is None
