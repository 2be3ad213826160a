"""The contract's declarations and capabilities (`positions/contract.py`), over every registered encoding: what
an encoding declares matches the hooks it defines, an undeclared hook is refused at registration, and each
capability is held by exactly the encodings that define its members."""

from __future__ import annotations

import pytest
import torch

import posformer as pf
from posformer.positions.contract import (
    AttentionKind,
    ForgetsKeys,
    GoesStale,
    OwnAttnScale,
    ReadsHidden,
    ReplacesSoftmax,
    Rescalable,
    Saturating,
    SchemeInitialised,
)


def overrides(cls: type, member: str) -> bool:
    """Whether `cls` defines `member` itself or through a subclass of `PositionEncoding`, not the contract's default."""
    base = pf.positions.PositionEncoding
    return getattr(cls, member) is not getattr(base, member)


@pytest.mark.parametrize("name", pf.positions.names())
def test_every_encoding_declares_what_it_implements(name: str) -> None:
    """The declarations the model reads (`attention`, `adds_bias`, `adds_values`, `sdpa_compatible`,
    `flex_form`) match the hooks the class defines: a new encoding that forgets one fails here."""
    cls = pf.positions.get(name)
    assert issubclass(cls, pf.positions.PositionEncoding) and cls.name == name
    kind = cls.attention
    assert (kind is AttentionKind.HIDDEN_TERMS) == isinstance(cls, ReadsHidden), name
    assert (kind is AttentionKind.OWN_WEIGHTS) == isinstance(cls, ReplacesSoftmax), name
    bias_hook = overrides(cls, "bias") or kind is AttentionKind.HIDDEN_TERMS
    assert cls.adds_bias == bias_hook, f"{name}: adds_bias={cls.adds_bias}, defines a bias: {bias_hook}"
    assert cls.adds_values == overrides(cls, "values"), name
    assert cls.sdpa_compatible == (not cls.adds_values and kind is not AttentionKind.OWN_WEIGHTS), name
    forms = {"distance_table": overrides(cls, "distance_bias"), "score_mod": overrides(cls, "score_mod")}
    if kind is AttentionKind.HIDDEN_TERMS:  # the terms' score_mod, asked of an encoding of random terms
        encoding = cls(pf.positions.Sizes(d_model=8, n_heads=2, head_dim=4), causal=True)
        q_terms, k_terms = encoding.token_terms(torch.randn(1, 3, 8), 0)
        forms["score_mod"] = encoding.terms_score_mod(q_terms, k_terms, torch.arange(3), 0) is not None
    defined = [form for form, present in forms.items() if present]
    assert [cls.flex_form] == (defined or [None]), f"{name}: flex_form={cls.flex_form!r}, defines {defined}"


def test_a_bias_hook_without_its_declaration_is_refused_at_registration() -> None:
    class Undeclared(pf.positions.PositionEncoding):
        def bias(self, q, k, q_pos, k_pos, layer):  # noqa: ANN001, ANN202 - the hook's own signature
            return None

    with pytest.raises(TypeError, match=r"'undeclared_bias' \(Undeclared\) defines the 'bias' hook: declare adds_bias"):
        pf.positions.register("undeclared_bias")(Undeclared)
    assert "undeclared_bias" not in pf.positions.names()


def test_a_capability_is_a_protocol_of_the_contract_that_its_encodings_satisfy() -> None:
    """The base class keeps the hooks every encoding may take; a capability some encodings have is a `Protocol` of
    the contract, which the encodings that define its members satisfy and the others do not."""
    hooks = (
        "scalings",
        "rescaled_params",
        "stale_beyond",
        "stale_at",
        "saturation_distance",
        "init_weights_",
        "default_attn_scale",
        "keys_seen",
    )
    assert not [hook for hook in hooks if hasattr(pf.positions.PositionEncoding, hook)]
    owners = {
        Rescalable: ["hope", "rope"],  # HoPE is RoPE with its low frequencies stopped
        GoesStale: ["hope", "rope"],
        Saturating: ["t5"],
        SchemeInitialised: ["t5"],
        OwnAttnScale: ["deberta"],
        ForgetsKeys: ["streaming"],
        ReplacesSoftmax: ["stick_breaking"],
    }
    for protocol, owners_of_it in owners.items():
        assert [name for name in pf.positions.names() if isinstance(pf.positions.get(name), protocol)] == owners_of_it
