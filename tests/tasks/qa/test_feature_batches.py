"""FeatureBatches' per-batch trimming and length grouping: the rows and labels stay the same, padding goes."""

from __future__ import annotations

import pytest
import torch

from posformer.tasks.qa.feature_batches import FeatureBatches, trim_batch


def _padded(lengths: list[int], width: int = 12) -> dict[str, torch.Tensor]:
    """Rows of the given real lengths, right-padded to `width`; token i of row r is 100 * r + i + 1."""
    n = len(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = (100 * torch.arange(n)[:, None] + torch.arange(width)[None, :] + 1) * mask
    labels = torch.full((n, 5), -100)
    for row, length in enumerate(lengths):
        labels[row, : length % 4 + 1] = row
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": mask.clone(),
        "labels": labels,
        "start_positions": torch.tensor(lengths) - 1,
    }


def test_trim_removes_only_padding():
    features = _padded([3, 7, 5, 2])
    batch = trim_batch(features)
    assert batch["input_ids"].shape == (4, 7) and batch["token_type_ids"].shape == (4, 7)
    assert batch["labels"].shape == (4, 4)  # row 1: length 7 -> 7 % 4 + 1 = 4 labels, the most
    assert torch.equal(batch["start_positions"], features["start_positions"])
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert features[name][:, 7:].eq(0).all() and torch.equal(batch[name], features[name][:, :7])
    assert features["labels"][:, 4:].eq(-100).all() and torch.equal(batch["labels"], features["labels"][:, :4])


def test_untrimmed_batches_keep_full_width_and_same_rows():
    features = _padded([3, 7, 5, 2, 9, 4])
    trimmed, full = FeatureBatches(features, 5), FeatureBatches(features, 5, trim=False)
    for _ in range(4):
        a, b = trimmed.next_batch(3), full.next_batch(3)
        assert b["input_ids"].shape[1] == 12
        width = a["input_ids"].shape[1]
        assert width == int(b["attention_mask"].sum(1).max())
        assert torch.equal(a["input_ids"], b["input_ids"][:, :width])


def test_grouping_sorts_each_group_and_keeps_every_row_once_per_epoch():
    lengths = [int(x) for x in torch.randint(1, 12, (40,), generator=torch.Generator().manual_seed(0))]
    features = _padded(lengths)
    grouped = FeatureBatches(features, 3, group_size=10)
    plain = FeatureBatches(features, 3)
    for epoch in range(2):
        order, base = grouped.epoch_order(epoch), plain.epoch_order(epoch)
        assert sorted(order.tolist()) == list(range(40))
        for g in range(4):
            part, raw = order[10 * g : 10 * g + 10], base[10 * g : 10 * g + 10]
            assert set(part.tolist()) == set(raw.tolist())  # the same random groups, reordered within
            group_lengths = [lengths[i] for i in part.tolist()]
            assert group_lengths == sorted(group_lengths, reverse=True)


def test_grouping_reduces_padding_and_resumes():
    lengths = [int(x) for x in torch.randint(1, 12, (64,), generator=torch.Generator().manual_seed(1))]
    features = _padded(lengths)

    def paid(batches: FeatureBatches) -> int:
        return sum(batches.next_batch(4)["input_ids"].numel() for _ in range(16))

    assert paid(FeatureBatches(features, 2, group_size=32)) < paid(FeatureBatches(features, 2))
    first = FeatureBatches(features, 2, group_size=32)
    [first.next_batch(4) for _ in range(5)]
    resumed = FeatureBatches(features, 2, group_size=32)
    resumed.load_state_dict(first.state_dict())
    for _ in range(20):
        assert torch.equal(first.next_batch(4)["input_ids"], resumed.next_batch(4)["input_ids"])
    with pytest.raises(ValueError, match="groups rows by length"):
        FeatureBatches(features, 2, group_size=16).load_state_dict(first.state_dict())


def test_grouping_needs_lengths_and_a_positive_size():
    with pytest.raises(ValueError, match="attention_mask"):
        FeatureBatches({"input_ids": torch.zeros(4, 3)}, 0, group_size=2)
    with pytest.raises(ValueError, match="group_size"):
        FeatureBatches(_padded([1, 2]), 0, group_size=0)
