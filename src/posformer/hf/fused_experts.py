"""Mixture-of-experts layers stored the way transformers 5 holds them in memory: one tensor per layer for all experts.

transformers 4.57.6 keeps one module per expert (`experts.{e}.gate_proj.weight`, ...); transformers 5 keeps
`experts.gate_up_proj` (n_experts, 2 d_ff, hidden), each expert's gate rows then its up rows, and
`experts.down_proj` (n_experts, hidden, d_ff), converting per-expert checkpoint tensors into these while it
loads (its `conversion_mapping`) and back while it saves. A checkpoint may hold either layout (a state dict saved
as the model holds it is fused); `split_fused_experts` turns the fused one into the per-expert one the families'
rules read, so both load the same model.
"""

from __future__ import annotations

import re

from torch import Tensor

from posformer.hf.mapping import WeightMapError

_FUSED = re.compile(r"(?P<layer>.*)\.mlp\.experts\.(?P<name>gate_up_proj|down_proj)")


def split_fused_experts(state: dict[str, Tensor], module: str, names: tuple[str, str, str]) -> dict[str, Tensor]:
    """`state` with each layer's fused `{layer}.mlp.experts.gate_up_proj` / `down_proj` split into per-expert
    tensors `{layer}.{module}.experts.{e}.{gate}.weight` (d_ff, hidden), `...{up}.weight` (d_ff, hidden) and
    `...{down}.weight` (hidden, d_ff), `names` = (gate, up, down); a fused layer's router `{layer}.mlp.gate.weight`
    becomes `{layer}.{module}.gate.weight` (transformers 5 renames Mixtral's `block_sparse_moe` `mlp`). A state
    without fused tensors comes back as it is; a fused tensor of the wrong rank, or a gate_up_proj with an odd
    number of rows, is a `WeightMapError` naming it."""
    if not any(_FUSED.fullmatch(key) for key in state):
        return state
    gate, up, down = names
    out = dict(state)
    for key, tensor in state.items():
        match = _FUSED.fullmatch(key)
        if match is None:
            continue
        layer = match["layer"]
        if tensor.dim() != 3 or (match["name"] == "gate_up_proj" and tensor.shape[1] % 2):
            raise WeightMapError(
                f"{key} {tuple(tensor.shape)}: expected (n_experts, 2 d_ff, hidden) for gate_up_proj, "
                "(n_experts, hidden, d_ff) for down_proj"
            )
        del out[key]
        prefix = f"{layer}.{module}.experts"
        for e, expert in enumerate(tensor.unbind(0)):
            if match["name"] == "down_proj":
                out[f"{prefix}.{e}.{down}.weight"] = expert
            else:
                out[f"{prefix}.{e}.{gate}.weight"], out[f"{prefix}.{e}.{up}.weight"] = expert.chunk(2, dim=0)
        if module != "mlp" and f"{layer}.mlp.gate.weight" in out:
            out[f"{layer}.{module}.gate.weight"] = out.pop(f"{layer}.mlp.gate.weight")
    return out
