"""Running under `torchrun`: process groups (gloo on CPU, nccl on GPU), DDP or FSDP, and rank-0 duties.

`torchrun --nproc_per_node N -m posformer.cli train ...` sets RANK, WORLD_SIZE and
LOCAL_RANK; without them the run is a single process and nothing here does anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class Context:
    """Where this process runs: its rank among world_size processes and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(setting: str, local_rank: int = 0) -> torch.device:
    """"auto": CUDA when available, else the CPU; "cuda" without a GPU is an error."""
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError("trainer.device='cuda' but no CUDA device is available (use 'auto' or 'cpu')")
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init(device_setting: str) -> Context:
    """Join the process group when launched by torchrun; return this process's `Context`."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_setting, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Context(rank, world_size, local_rank, device)


def wrap(model: nn.Module, ctx: Context, parallel: str) -> nn.Module:
    """DDP (gradients all-reduced) or FSDP (`fully_shard`: parameters sharded) across processes."""
    if not ctx.distributed:
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in [*getattr(getattr(model, "encoder", None), "layers", []),
                      *getattr(getattr(model, "decoder", None), "layers", [])]:
            fully_shard(block)
        return fully_shard(model)
    return nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)


def mean_across(value: torch.Tensor, ctx: Context) -> torch.Tensor:
    """The mean of a scalar tensor over all processes."""
    if not ctx.distributed:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / ctx.world_size


def all_true(flag: bool, ctx: Context) -> bool:
    """True when `flag` holds on every process (so all skip a backward pass together)."""
    if not ctx.distributed:
        return flag
    value = torch.tensor(float(flag), device=ctx.device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        dist.barrier()


def shutdown(ctx: Context) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()
