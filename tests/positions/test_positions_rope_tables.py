"""RoPE's cos/sin tables as one operator, posformer::rope_cos_sin: torch's opcheck, the formula in
float64, no gradient through the frequencies, and one table computation per compiled forward."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.positions import rope_inv_freq
from tests.conftest import tiny


# --------------------------------------------------------------------------- the cos/sin tables as one operator
def test_cos_sin_operator_passes_torch_opcheck() -> None:
    """posformer::rope_cos_sin's schema, shape function and dispatch agree (torch.library.opcheck)."""
    from posformer.positions.rotary import _cos_sin_op

    pos = torch.tensor([[0, 3, 7, 2048], [5, 6, 7, 8]])
    for inv_freq, factor in ((rope_inv_freq(8, 10000.0)[0], 1.0), (rope_inv_freq(16, 500.0)[0].double(), 0.7)):
        torch.library.opcheck(_cos_sin_op, (pos, inv_freq, factor))


def test_cos_sin_tables_are_the_formula_in_float64() -> None:
    from posformer.positions.rotary import rope_cos_sin

    pos = torch.randint(0, 100_000, (2, 9))
    inv_freq = rope_inv_freq(32, 10000.0)[0].double()
    cos, sin = rope_cos_sin(pos, inv_freq, 1.25)
    angles = [[[[p * f for f in inv_freq.tolist()] for p in row]] for row in pos.tolist()]
    assert cos.dtype == torch.float64 and cos.shape == (2, 1, 9, 16)
    torch.testing.assert_close(cos, 1.25 * torch.tensor(angles, dtype=torch.float64).cos(), rtol=0, atol=1e-12)
    torch.testing.assert_close(sin, 1.25 * torch.tensor(angles, dtype=torch.float64).sin(), rtol=0, atol=1e-12)


def test_cos_sin_refuses_frequencies_that_need_a_gradient() -> None:
    from posformer.positions.rotary import rope_cos_sin

    with pytest.raises(ValueError, match="inv_freq must not require grad"):
        rope_cos_sin(torch.arange(4)[None], torch.ones(2, requires_grad=True))


def test_compiled_decoder_computes_the_tables_once_per_forward() -> None:
    """Under torch.compile the tables are one node of the graph, not inlined into every layer's rotation."""
    cfg = tiny("decoder", position="rope", n_layers=3)
    model = pf.Transformer(cfg).eval()
    graphs = []

    def count_ops(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(sum(node.target is torch.ops.posformer.rope_cos_sin.default for node in gm.graph.nodes))
        return gm.forward

    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    with torch.no_grad():
        expected = model(ids).logits
        got = torch.compile(model, backend=count_ops, fullgraph=True)(ids).logits
    torch.testing.assert_close(got, expected)
    assert graphs == [1]
