"""The summed token cross-entropy against torch's `F.cross_entropy` (value and gradient), finite differences,
and its errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from posformer.ops.cross_entropy import token_cross_entropy

IGNORE = -100


def logits_and_labels(dtype: torch.dtype, ignored: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    logits = (torch.randn(9, 13) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 13, (9,))
    labels[torch.randperm(9)[:ignored]] = IGNORE
    return logits, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ignored", [0, 3, 9])
def test_value_and_gradient_equal_torch_cross_entropy(dtype: torch.dtype, ignored: int) -> None:
    logits, labels = logits_and_labels(dtype, ignored)
    ours = token_cross_entropy(logits, labels, IGNORE)
    grad_seed = torch.tensor(1.7)
    (ours_grad,) = torch.autograd.grad(ours, logits, grad_seed)
    theirs = F.cross_entropy(
        logits.to(torch.promote_types(dtype, torch.float32)), labels, ignore_index=IGNORE, reduction="sum"
    )
    (theirs_grad,) = torch.autograd.grad(theirs, logits, grad_seed)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_grad, theirs_grad)


def test_bfloat16_logits_get_a_bfloat16_gradient_of_the_float32_loss() -> None:
    logits, labels = logits_and_labels(torch.bfloat16)
    ours = token_cross_entropy(logits, labels, IGNORE)
    ours.backward()
    wide = logits.detach().float().requires_grad_()
    F.cross_entropy(wide, labels, ignore_index=IGNORE, reduction="sum").backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(ours, F.cross_entropy(wide.detach(), labels, ignore_index=IGNORE, reduction="sum"))
    torch.testing.assert_close(logits.grad, wide.grad.to(torch.bfloat16))


def test_passes_gradcheck() -> None:
    logits, labels = logits_and_labels(torch.float64)
    assert torch.autograd.gradcheck(lambda x: token_cross_entropy(x, labels, IGNORE), (logits,))


@pytest.mark.parametrize("bad", [13, -1, -7])
def test_a_label_outside_the_vocabulary_is_named(bad: int) -> None:
    logits, labels = logits_and_labels(torch.float32)
    labels[0] = bad
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 13\) or be -100, got values in"):
        token_cross_entropy(logits, labels, IGNORE)


def test_labels_must_have_one_entry_per_row() -> None:
    logits, labels = logits_and_labels(torch.float32)
    with pytest.raises(ValueError, match=r"labels has shape \(8,\); expected \(9,\)"):
        token_cross_entropy(logits, labels[:8], IGNORE)
