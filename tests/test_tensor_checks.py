"""Value checks: a ValueError with the values seen on the CPU, a device assert elsewhere whose message fits what
CUDA's assert takes (it refuses 255 characters or more)."""

import pytest
import torch

import posformer as pf
from posformer.utils import tensor_checks
from posformer.utils.tensor_checks import DEVICE_MESSAGE_LIMIT, check_in_range, device_message


def test_device_message_keeps_a_short_message_and_cuts_a_long_one_visibly() -> None:
    assert device_message("ids out of range") == "ids out of range"
    long = "position_ids reach beyond the table " * 10
    cut = device_message(long)
    assert len(cut) == DEVICE_MESSAGE_LIMIT and cut.endswith("...") and long.startswith(cut[:-3])


def test_every_device_assert_of_a_model_forward_fits_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's checks (token ids, the learned table's long positions message, labels) as they run on an
    accelerator: each becomes one asynchronous assert with a message CUDA takes."""
    asserted: list[str] = []
    monkeypatch.setattr(tensor_checks, "reads_values_cheaply", lambda t: False)
    monkeypatch.setattr(torch, "_assert_async", lambda ok, message: asserted.append(message))
    cfg = pf.Config(vocab_size=20, d_model=16, n_layers=1, n_heads=2, d_ff=32, position="learned", max_positions=8)
    ids = torch.randint(0, 20, (2, 6))
    pf.Transformer(cfg)(input_ids=ids, labels=ids)
    assert any("learned position table" in message for message in asserted)
    assert all(len(message) <= DEVICE_MESSAGE_LIMIT for message in asserted)


def test_out_of_range_values_on_the_cpu_name_what_was_seen() -> None:
    with pytest.raises(ValueError, match=r"ids must be small, got values in \[0, 9\]"):
        check_in_range(torch.tensor([0, 9]), 0, 5, "ids must be small")
