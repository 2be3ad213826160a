"""`Config.kv_sources` and `Config.values_from_keys`: self-attention layers whose keys and values are not their
own projections, checked (`check_kv_sharing`, part of `Config.validate`).

`kv_sources` (one entry per layer of the stack, arch decoder or encoder): None for a layer that makes its own keys
and values, or the index j of an earlier layer whose keys and values it attends over instead (KV sharing: Gemma 4's
`num_kv_shared_layers`, Brandon et al. 2024's cross-layer attention). Such a layer has no key or value projection
and caches nothing: it reads what layer j made in the same forward, after layer j's KV cache took them (so the
cached keys too), with its own queries, position encoding hooks and mask. Layer j makes its own; both are attention
layers with the same head sizes and position settings (the keys carry layer j's rotation), of an encoding whose
attention is a softmax over the hooks (`AttentionKind.SOFTMAX`); no smeared keys, no latent attention.

`values_from_keys` (a per-layer setting too): the values are the key projection's output, before QK-norm and the
position encoding, and the layer has no value projection (Gemma 4's `attention_k_eq_v`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posformer import positions
from posformer.utils.validation import fail, is_int

if TYPE_CHECKING:
    from posformer.config import Config

# what a layer reading another's keys and values must share with it: the keys' shape and their rotation
SHARED_WITH_SOURCE = ("mixer", "position", "position_params", "head_dim", "kv_heads")


def check_kv_sharing(cfg: "Config") -> None:
    """`values_from_keys` and `kv_sources` (see the module): the layers, their sources and what they share."""
    if cfg.values_from_keys and (cfg.mixer != "attention" or cfg.latent_attention is not None):
        fail("Config.values_from_keys", True, "False unless the layer's mixer is (ordinary) self-attention")
    sources = cfg.kv_sources
    if sources is None:
        return
    n = cfg.n_layers
    if cfg.arch == "encoder_decoder":
        fail("Config.kv_sources", sources, "None with arch='encoder_decoder' (one stack's layers only)")
    if not isinstance(sources, (list, tuple)) or len(sources) != n:
        fail("Config.kv_sources", sources, f"None or a list of n_layers={n} entries (None or a layer index)")
    cfg.kv_sources = list(sources)
    for name, value in (("key_smear", cfg.key_smear), ("latent_attention", cfg.latent_attention)):
        if value:
            fail(f"Config.{name}", value, f"{'False' if name == 'key_smear' else 'None'} with kv_sources")
    layers = cfg.layer_configs(n)
    for i, j in enumerate(sources):
        if j is None:
            continue
        if not is_int(j) or not 0 <= j < i:
            fail(f"Config.kv_sources[{i}]", j, f"None or the index of an earlier layer (0 to {i - 1})")
        if sources[j] is not None:
            fail(f"Config.kv_sources[{i}]", j, f"a layer that makes its own keys and values (kv_sources[{j}] is None)")
        for name in SHARED_WITH_SOURCE:
            if getattr(layers[i], name) != getattr(layers[j], name):
                fail(
                    f"Config.kv_sources[{i}]",
                    j,
                    f"a layer of the same {name} as layer {i} ({getattr(layers[j], name)!r} != "
                    f"{getattr(layers[i], name)!r})",
                )
        if layers[i].mixer != "attention":
            fail(f"Config.kv_sources[{i}]", j, "None for a layer whose mixer is not self-attention")
        if positions.get(layers[i].position).attention is not positions.AttentionKind.SOFTMAX:
            fail(
                f"Config.kv_sources[{i}]",
                j,
                f"None with position={layers[i].position!r}, whose attention is not a softmax over the hooks "
                "(it reads more than the keys and values)",
            )
