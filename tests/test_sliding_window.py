"""Sliding-window attention (Config.sliding_window): each query sees exactly its last W key slots, with any
position encoding, through the KV cache (which keeps more keys than the window) and with left padding."""

import pytest
import torch

import posformer as pf
from tests.positions.test_positions_conformance import config

WINDOW = 3


def windowed(name: str, **changes) -> pf.Transformer:
    torch.manual_seed(0)
    return pf.Transformer(config(name, "decoder", sliding_window=WINDOW, **changes)).eval()


@pytest.mark.parametrize("name", ["rope", "alibi", "shaw"])
def test_the_window_hides_exactly_the_keys_outside_it(name: str) -> None:
    """The attention probabilities are positive exactly on real keys j with i - W < j <= i (token slots,
    pads counted), and zero elsewhere; a query whose window holds only pads attends to nothing."""
    model = windowed(name)
    ids = torch.randint(1, model.cfg.vocab_size, (2, 8))
    mask = torch.tensor([[1] * 8, [0] * 4 + [1] * 4])
    probs = model(ids, attention_mask=mask, output_attentions=True).attentions
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    inside = (j <= i) & (j > i - WINDOW)
    for layer in probs:
        for row in range(2):
            expected = inside & mask[row].bool()[None, :] & mask[row].bool()[:, None]
            assert torch.equal(layer[row] > 0, expected.expand_as(layer[row])), (name, row)


@pytest.mark.parametrize("name", pf.positions.names())
def test_cached_decoding_past_the_window_equals_the_full_pass(name: str) -> None:
    """Greedy tokens from a left-padded batch through the cache equal the argmax of one full pass over the
    result (at the positions generate gives: counted over the real tokens), with a prompt and a generation
    both longer than the window."""
    model = windowed(name)
    prompt = torch.randint(1, model.cfg.vocab_size, (2, 5))
    mask = torch.tensor([[1] * 5, [0] * 2 + [1] * 3])
    out = model.generate(prompt, attention_mask=mask, max_new_tokens=5, eos_token_id=[])
    full_mask = torch.cat([mask, torch.ones(2, 5, dtype=mask.dtype)], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(out, attention_mask=full_mask, position_ids=positions).logits
    assert torch.equal(logits[:, 4:-1].argmax(-1), out[:, 5:])


def test_a_window_longer_than_the_input_changes_nothing() -> None:
    torch.manual_seed(0)
    plain = pf.Transformer(config("rope", "decoder")).eval()
    wide = pf.Transformer(config("rope", "decoder", sliding_window=64)).eval()
    wide.load_state_dict(plain.state_dict())
    ids = torch.randint(1, plain.cfg.vocab_size, (2, 7))
    torch.testing.assert_close(wide(ids).logits, plain(ids).logits, atol=0, rtol=0)


def test_one_query_step_sees_only_the_window() -> None:
    from posformer.ops.masks import build_mask

    mask = build_mask(None, True, 1, 6, torch.float32, torch.device("cpu"), window=WINDOW)
    assert torch.equal(mask.additive[0, 0, 0] == 0, torch.tensor([False, False, False, True, True, True]))


def test_sliding_window_needs_a_causal_stack() -> None:
    with pytest.raises(ValueError, match=r"Config.sliding_window=3 is invalid: expected None with arch='encoder'"):
        config("rope", "encoder", sliding_window=3)
