"""The structure of a checkpoint's `trainer_state.pt`, checked before the trainer uses any of it.

`torch.load(weights_only=True)` runs no code, but it returns whatever plain containers the file
holds: a tampered file (its manifest rewritten to match) can hold a list, miss the RNG states, put
a string where a step count belongs or give the optimizer moments of the wrong shape (which the fused
AdamW kernel would not even check). `check_trainer_state` refuses such a state with a `CorruptCheckpoint`
naming the file and the field, so `--resume` falls back to the previous checkpoint.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from posformer.checkpoints.manifest import CorruptCheckpoint
from posformer.utils.validation import is_int, is_number

MT19937_WORDS = 624  # the state of Python's and numpy's Mersenne Twister
GROUP_NUMBERS = ("lr", "initial_lr", "eps", "weight_decay")


def _type(value: Any) -> str:
    return type(value).__name__


def _scalar(value: Any) -> bool:
    return is_number(value) or (isinstance(value, torch.Tensor) and value.dim() == 0)


class _Checker:
    """Reads fields of one trainer state file; each failure names the file and the field."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, field: str, value: Any, expected: str) -> None:
        got = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else _type(value)
        raise CorruptCheckpoint(f"{self.file}: field {field!r} is invalid: expected {expected}, got {got}")

    def get(self, mapping: dict, key: str, field: str) -> Any:
        if key not in mapping:
            raise CorruptCheckpoint(f"{self.file}: field {field!r} is missing")
        return mapping[key]

    def dict(self, mapping: dict, key: str, field: str) -> dict:
        value = self.get(mapping, key, field)
        if not isinstance(value, dict):
            self.fail(field, value, "a dict")
        return value

    def int(self, mapping: dict, key: str, field: str, low: int | None = None, high: int | None = None) -> int:
        value = self.get(mapping, key, field)
        if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
            bounds = f" in [{low}, {high}]" if high is not None else f" >= {low}" if low is not None else ""
            self.fail(field, value, f"an integer{bounds}")
        return value

    def numbers(self, mapping: dict, key: str, field: str, length: int) -> None:
        value = self.get(mapping, key, field)
        if not isinstance(value, (list, tuple)) or len(value) != length or not all(map(is_number, value)):
            self.fail(field, value, f"a list of {length} numbers")


def _check_group(c: _Checker, group: Any, field: str, shapes: dict[str, tuple[int, ...]] | None) -> list:
    if not isinstance(group, dict):
        c.fail(field, group, "a dict")
    params = c.get(group, "params", f"{field}.params")
    if not isinstance(params, list) or (shapes is not None and not all(p in shapes for p in params)):
        c.fail(f"{field}.params", params, "a list of the model's parameter names")
    c.get(group, "lr", f"{field}.lr")
    for key in GROUP_NUMBERS:
        if key in group and not _scalar(group[key]):
            c.fail(f"{field}.{key}", group[key], "a number")
    if "betas" in group:
        c.numbers(group, "betas", f"{field}.betas", 2)
    return params


def _check_optimizer(c: _Checker, state: dict, shapes: dict[str, tuple[int, ...]] | None) -> int:
    """Check the optimizer state (its moments against the parameters' `shapes`); the number of param groups."""
    optimizer = c.dict(state, "optimizer", "optimizer")
    moments = c.dict(optimizer, "state", "optimizer.state")
    groups = c.get(optimizer, "param_groups", "optimizer.param_groups")
    if not isinstance(groups, list) or not groups:
        c.fail("optimizer.param_groups", groups, "a non-empty list")
    listed = {
        p for i, group in enumerate(groups) for p in _check_group(c, group, f"optimizer.param_groups[{i}]", shapes)
    }
    for name, entry in moments.items():
        field = f"optimizer.state[{name!r}]"
        if name not in listed or not isinstance(entry, dict):
            c.fail(field, entry, "a dict of the moments of a parameter listed in param_groups")
        for key, value in entry.items():
            shape = shapes.get(name) if shapes is not None else None
            if isinstance(value, torch.Tensor):
                if value.dim() and shape is not None and tuple(value.shape) != shape:
                    c.fail(f"{field}.{key}", value, f"a scalar or a tensor of the parameter's shape {shape}")
            elif not is_number(value):
                c.fail(f"{field}.{key}", value, "a tensor or a number")
    return len(groups)


def _check_scheduler(c: _Checker, state: dict, groups: int) -> None:
    """The LambdaLR state `train.optim.build_scheduler` saves: one entry per param group."""
    scheduler = c.dict(state, "scheduler", "scheduler")
    c.int(scheduler, "last_epoch", "scheduler.last_epoch", low=-1)
    c.numbers(scheduler, "base_lrs", "scheduler.base_lrs", groups)
    if "_last_lr" in scheduler:
        c.numbers(scheduler, "_last_lr", "scheduler._last_lr", groups)
    if "_step_count" in scheduler:
        c.int(scheduler, "_step_count", "scheduler._step_count", low=0)
    lambdas = c.get(scheduler, "lr_lambdas", "scheduler.lr_lambdas")
    if (
        not isinstance(lambdas, list)
        or len(lambdas) != groups
        or not all(f is None or isinstance(f, dict) for f in lambdas)
    ):
        c.fail("scheduler.lr_lambdas", lambdas, f"a list of {groups} entries (None or a dict)")


def _check_rng(c: _Checker, state: dict) -> None:
    rng = c.dict(state, "rng", "rng")
    python = c.get(rng, "python", "rng.python")
    if not (
        isinstance(python, (tuple, list))
        and len(python) == 3
        and python[0] == random.getstate()[0]
        and isinstance(python[1], (tuple, list))
        and len(python[1]) == MT19937_WORDS + 1
        and all(is_int(word) for word in python[1])
        and (python[2] is None or isinstance(python[2], float))
    ):
        c.fail("rng.python", python, "random.getstate()'s (version, 625 integers, gauss) triple")
    numpy = c.dict(rng, "numpy", "rng.numpy")
    if c.get(numpy, "kind", "rng.numpy.kind") != "MT19937":
        c.fail("rng.numpy.kind", numpy["kind"], "'MT19937'")
    keys = c.get(numpy, "keys", "rng.numpy.keys")
    if not isinstance(keys, torch.Tensor) or keys.shape != (MT19937_WORDS,) or keys.dtype.is_floating_point:
        c.fail("rng.numpy.keys", keys, f"a tensor of {MT19937_WORDS} integers")
    c.int(numpy, "pos", "rng.numpy.pos", low=0, high=MT19937_WORDS)
    c.int(numpy, "has_gauss", "rng.numpy.has_gauss", low=0, high=1)
    if not isinstance(c.get(numpy, "gauss", "rng.numpy.gauss"), float):
        c.fail("rng.numpy.gauss", numpy["gauss"], "a float")
    generator, expected = c.get(rng, "torch", "rng.torch"), torch.get_rng_state()
    if not isinstance(generator, torch.Tensor) or generator.dtype != torch.uint8 or generator.shape != expected.shape:
        c.fail("rng.torch", generator, f"torch.get_rng_state()'s uint8 tensor of shape {tuple(expected.shape)}")
    cuda = rng.get("cuda", [])
    if not isinstance(cuda, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in cuda):
        c.fail("rng.cuda", cuda, "a list of tensors")


def _check_counters(c: _Checker, mapping: dict, field: str) -> None:
    """The batches' state: its shape is each batches class's own (`TokenBatches`: seed, epoch, index; a
    `PasskeyMix`: the wrapped batches' state and a draw count), so only its kind is checked here: integers, or
    dicts of them; a seed may be negative, every other counter must not be. The batches' `load_state_dict`
    names what it misses."""
    for key, value in mapping.items():
        name = f"{field}.{key}"
        if isinstance(value, dict):
            _check_counters(c, value, name)
        else:
            c.int(mapping, key, name, low=None if key == "seed" else 0)


def check_trainer_state(state: Any, file: Path, step: int, shapes: dict[str, tuple[int, ...]] | None = None) -> dict:
    """`state` (the contents of `file`, the trainer state of checkpoint `step`) when it has the trainer's
    structure; else a `CorruptCheckpoint` naming the file and the field. shapes: the model's tensor shapes by
    name (`checkpoints.native.check_checkpoint`), to check the optimizer state against; None: not checked."""
    c = _Checker(file)
    if not isinstance(state, dict):
        raise CorruptCheckpoint(f"{file} does not hold a dict of trainer state, got {_type(state)}")
    if c.int(state, "step", "step") != step:
        raise CorruptCheckpoint(f"{file} holds step {state['step']}, not {step}")
    _check_scheduler(c, state, _check_optimizer(c, state, shapes))
    scaler = state.get("scaler")
    if scaler is not None and not (isinstance(scaler, dict) and all(map(is_number, scaler.values()))):
        c.fail("scaler", scaler, "None or a dict of numbers")
    _check_counters(c, c.dict(state, "data", "data"), "data")
    _check_rng(c, state)
    if "skipped" in state:
        c.int(state, "skipped", "skipped", low=0)
    return state
