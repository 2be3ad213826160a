"""Sliding-window attention (Config.sliding_window): each query sees exactly its last W key slots, with any
position encoding, through the KV cache (which keeps more keys than the window) and with left padding; an
encoder's query the slots fewer than W away on either side."""

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


@pytest.mark.parametrize("name", ["rope", "alibi", "shaw"])
@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_an_encoder_window_hides_exactly_the_keys_farther_on_either_side(name: str, attn_impl: str) -> None:
    """Bidirectional: the probabilities are positive exactly on real keys j with |i - j| < W (token slots, pads
    counted), the window ModernBERT's local layers slide, with W - 1 = local_attention // 2 on each side; a query
    whose window holds only pads attends to nothing."""
    torch.manual_seed(0)
    model = pf.Transformer(config(name, "encoder", sliding_window=WINDOW, attn_impl=attn_impl)).eval()
    ids = torch.randint(1, model.cfg.vocab_size, (2, 9))
    mask = torch.tensor([[1] * 9, [0] * 3 + [1] * 5 + [0]])
    probs = model(ids, attention_mask=mask, output_attentions=True).attentions
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    inside = (i - j).abs() < WINDOW
    for layer in probs:
        for row in range(2):
            expected = inside & mask[row].bool()[None, :]
            assert torch.equal(layer[row] > 0, expected.expand_as(layer[row])), (name, row)


def test_an_encoder_window_changes_only_what_lies_beyond_it() -> None:
    """A window wider than the input is no window; a narrower one changes the outputs (it hides keys)."""
    torch.manual_seed(0)
    plain = pf.Transformer(config("rope", "encoder")).eval()
    ids = torch.randint(1, plain.cfg.vocab_size, (2, 7))
    for window, same in ((7, True), (3, False)):
        windowed = pf.Transformer(config("rope", "encoder", sliding_window=window)).eval()
        windowed.load_state_dict(plain.state_dict())
        assert torch.equal(windowed(ids).logits, plain(ids).logits) == same, window


def test_an_encoder_decoder_slides_its_encoder_both_ways_and_its_decoder_back() -> None:
    """Each stack's self-attention takes the window its order allows (the encoder used to fail with a KeyError)."""
    torch.manual_seed(0)
    model = pf.Transformer(config("rope", "encoder_decoder", sliding_window=WINDOW)).eval()
    ids = torch.randint(1, model.cfg.vocab_size, (1, 8))
    out = model(ids, decoder_input_ids=ids[:, :6], output_attentions=True)
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    encoder_probs = out.attentions[0][0]  # the encoder's layers first, then each decoder layer's self, cross
    assert torch.equal(encoder_probs > 0, ((i - j).abs() < WINDOW).expand_as(encoder_probs))
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    decoder_probs = out.attentions[model.cfg.n_layers][0]
    assert torch.equal(decoder_probs > 0, ((j <= i) & (j > i - WINDOW)).expand_as(decoder_probs))
