"""`Config.per_layer_inputs`: a small input of its own for every layer of a decoder (Gemma 4's per-layer
embeddings, PLE), checked and resolved (`check_per_layer_inputs`, part of `Config.validate`).

{"dim": P, "vocab_size": V}: a table of V tokens by n_layers * P features and a projection of the token
embeddings give each token P features for each layer (`posformer.modules.per_layer_inputs`); each layer mixes its
own into the residual stream after its feed-forward. `vocab_size` may be left out: the config's `vocab_size`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from posformer.utils.limits import MAX_VOCAB, MAX_WIDTH
from posformer.utils.validation import check_int, fail

if TYPE_CHECKING:
    from posformer.config import Config

PER_LAYER_INPUT_KEYS = ("dim", "vocab_size")


def check_per_layer_inputs(cfg: "Config") -> None:
    """`per_layer_inputs` None or {"dim": P, "vocab_size": V} (V defaults to `vocab_size`), resolved in place; with
    it: arch decoder and no sink tokens (each input position has its per-layer inputs)."""
    spec = cfg.per_layer_inputs
    if spec is None:
        return
    expected = 'None or {"dim": P, "vocab_size": V} (vocab_size may be left out)'
    if not isinstance(spec, Mapping) or "dim" not in spec or set(spec) - set(PER_LAYER_INPUT_KEYS):
        fail("Config.per_layer_inputs", spec, expected)
    spec = {"vocab_size": cfg.vocab_size, **spec}
    check_int("Config.per_layer_inputs['dim']", spec["dim"], maximum=MAX_WIDTH)
    check_int("Config.per_layer_inputs['vocab_size']", spec["vocab_size"], maximum=MAX_VOCAB)
    cfg.per_layer_inputs = {key: spec[key] for key in PER_LAYER_INPUT_KEYS}
    if cfg.arch != "decoder":
        fail("Config.per_layer_inputs", cfg.per_layer_inputs, f"None with arch={cfg.arch!r} (a decoder's layers)")
    if cfg.sink_tokens:
        fail("Config.per_layer_inputs", cfg.per_layer_inputs, "None with sink_tokens (positions without a token)")
