"""Weight mapping between Hugging Face state dicts and posformer modules.

A family describes its checkpoint layout as a list of `Rule`s: one posformer
tensor and the Hugging Face tensor(s) it is made of, with the two conversions.
`import_state` and `export_state` apply the rules in each direction and report
every key that is missing, unknown or of the wrong shape in one error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor, nn


class WeightMapError(ValueError):
    """The checkpoint's tensors do not fit the model its config describes."""


@dataclass(frozen=True)
class Rule:
    """posformer tensor `ours` <- Hugging Face tensors `theirs`.

    to_ours: the HF tensors (in the order of `theirs`) -> our tensor.
    to_theirs: our tensor -> the HF tensors (in the order of `theirs`).
    """

    ours: str
    theirs: tuple[str, ...]
    to_ours: Callable[[list[Tensor]], Tensor]
    to_theirs: Callable[[Tensor], list[Tensor]]


def same(ours: str, theirs: str) -> Rule:
    """One tensor under another name."""
    return Rule(ours, (theirs,), lambda ts: ts[0], lambda t: [t])


def transposed(ours: str, theirs: str) -> Rule:
    """GPT-2's Conv1D stores (in, out); nn.Linear stores (out, in)."""
    return Rule(ours, (theirs,), lambda ts: ts[0].t(), lambda t: [t.t()])


def concat(ours: str, theirs: Iterable[str], sizes: Iterable[int]) -> Rule:
    """Our tensor is the HF tensors stacked along dim 0 (fused q/k/v, fused gate/up); `sizes` are their rows."""
    sizes = tuple(sizes)
    return Rule(ours, tuple(theirs), lambda ts: torch.cat(ts, dim=0), lambda t: list(t.split(sizes, dim=0)))


def linear(ours: str, theirs: str, bias: bool = True) -> list[Rule]:
    """`ours.weight` <- `theirs.weight`, and the biases when present."""
    rules = [same(f"{ours}.weight", f"{theirs}.weight")]
    return rules + [same(f"{ours}.bias", f"{theirs}.bias")] if bias else rules


def norm(ours: str, theirs: str, bias: bool = True) -> list[Rule]:
    """A LayerNorm (weight and bias) or an RMSNorm (weight only)."""
    return linear(ours, theirs, bias)


def fused_linear(ours: str, theirs: Iterable[str], sizes: Iterable[int], bias: bool) -> list[Rule]:
    """`ours` is one nn.Linear whose output rows are the HF linears `theirs`, in order."""
    theirs, sizes = tuple(theirs), tuple(sizes)
    rules = [concat(f"{ours}.weight", (f"{t}.weight" for t in theirs), sizes)]
    return rules + [concat(f"{ours}.bias", (f"{t}.bias" for t in theirs), sizes)] if bias else rules


def expected_keys(model: nn.Module) -> dict[str, torch.Size]:
    """Every tensor the model saves, with shared (tied) parameters counted once."""
    named = dict(model.named_parameters())
    tensors = model.state_dict(keep_vars=True)
    aliases = {k for k in tensors if k not in named and any(tensors[k] is p for p in named.values())}
    return {k: v.shape for k, v in tensors.items() if k not in aliases}


def _listing(title: str, items: list[str], limit: int = 25) -> str:
    shown = items[:limit]
    more = f"\n    ... and {len(items) - limit} more" if len(items) > limit else ""
    return f"  {title} ({len(items)}):\n" + "\n".join(f"    {s}" for s in shown) + more


def import_state(
    model: nn.Module,
    rules: list[Rule],
    state: dict[str, Tensor],
    source: str,
    ignore: Iterable[str] = (),
    fresh: Iterable[str] = (),
) -> None:
    """Load the HF `state` into `model` through `rules`.

    `ignore`: regular expressions of HF keys that are read and deliberately
    dropped (buffers HF recomputes, a pooler posformer's head does not use).
    `fresh`: posformer tensors that no rule fills and that keep the model's own initialisation (the tensors a
    changed config adds, such as the encoder's span head of `Config.encoder_span_loss`).
    Raises `WeightMapError` listing every missing, unknown and mis-shaped key.
    """
    patterns = [re.compile(p) for p in ignore]
    wanted = {key for rule in rules for key in rule.theirs}
    missing = sorted(wanted - set(state))
    unknown = sorted(k for k in state if k not in wanted and not any(p.fullmatch(k) for p in patterns))
    expected = expected_keys(model)
    built: dict[str, Tensor] = {}
    wrong: list[str] = []
    for rule in rules:
        if any(key not in state for key in rule.theirs):
            continue
        tensor = rule.to_ours([state[key] for key in rule.theirs])
        want = expected.get(rule.ours)
        if want is None:
            raise WeightMapError(f"posformer mapping error: rule target {rule.ours!r} is not a tensor of the model")
        if tensor.shape != want:
            shapes = ", ".join(f"{key} {tuple(state[key].shape)}" for key in rule.theirs)
            wrong.append(f"{shapes} -> posformer {rule.ours} expects {tuple(want)}, got {tuple(tensor.shape)}")
        built[rule.ours] = tensor
    uncovered = sorted(set(expected) - {rule.ours for rule in rules} - set(fresh))
    if missing or unknown or wrong or uncovered:
        parts = [f"cannot load {source} into posformer:"]
        if missing:
            parts.append(_listing("missing from the checkpoint", missing))
        if unknown:
            parts.append(
                _listing(
                    "unknown to the mapping (checkpoint key, shape)", [f"{k} {tuple(state[k].shape)}" for k in unknown]
                )
            )
        if wrong:
            parts.append(_listing("wrong shape", wrong))
        if uncovered:
            parts.append(_listing("posformer tensors with no source (a mapping bug)", uncovered))
        raise WeightMapError("\n".join(parts))
    with torch.no_grad():
        params = dict(model.state_dict(keep_vars=True))
        for name, tensor in built.items():
            params[name].copy_(tensor)


def export_state(model: nn.Module, rules: list[Rule]) -> dict[str, Tensor]:
    """The model's tensors under their Hugging Face names."""
    ours = model.state_dict()
    out: dict[str, Tensor] = {}
    for rule in rules:
        for key, tensor in zip(rule.theirs, rule.to_theirs(ours[rule.ours]), strict=True):
            out[key] = tensor.contiguous()
    return out
