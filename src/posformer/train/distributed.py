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


def launched_as_main() -> bool:
    """True unless torchrun started this process with a rank other than 0 (readable before `init`)."""
    return int(os.environ.get("RANK", "0")) == 0


def resolve_device(setting: str, local_rank: int = 0) -> torch.device:
    """ "auto": CUDA when available, else the CPU; "cuda" without a GPU is an error."""
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

        for block in [
            *getattr(getattr(model, "encoder", None), "layers", []),
            *getattr(getattr(model, "decoder", None), "layers", []),
        ]:
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


def max_across(value: int, ctx: Context) -> int:
    """The largest of an integer over all processes (the signal that stops a run: every rank stops on it)."""
    if not ctx.distributed:
        return value
    tensor = torch.tensor(value, device=ctx.device, dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        dist.barrier()


def shutdown(completed: bool = True) -> None:
    """Leave the process group, if any (the command line's job is done; NCCL warns at exit otherwise).

    After a completed run every process first waits at a barrier: a process that tore its group down
    while another was still finishing its last collective aborted the other one at exit (gloo,
    "terminate called without an active exception"). After a failure there is no barrier, as the
    other processes may never reach it.
    """
    if dist.is_available() and dist.is_initialized():
        if completed:
            dist.barrier()
        dist.destroy_process_group()


def exit_worker(status: int) -> None:
    """End a torchrun worker process now, with `status`, once its group is left (`shutdown`) and its output flushed.

    Gloo's worker threads can still hold finished collectives whose tensors reference Python objects; freed
    during interpreter finalization they take the GIL of an interpreter being torn down, and the process aborts
    ("terminate called without an active exception", SIGABRT: pytorch/pytorch#179291) after a run that
    completed. Collecting them while the interpreter is alive, then skipping finalization, avoids it. A single
    process (not launched by torchrun) returns and exits normally.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    import gc
    import sys

    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def is_sharded(model: nn.Module) -> bool:
    """True for a model wrapped by FSDP2's `fully_shard` (its parameters are DTensor shards)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _reshard(model: nn.Module) -> None:
    """Put FSDP's sharded parameters back in place: a forward under no_grad (evaluation) leaves the root's
    parameters gathered, and the optimizer and the state-dict functions know the sharded ones only."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def tied_names(model: nn.Module) -> list[list[str]]:
    """Groups of parameter names that share one parameter (tied embeddings), each sorted."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [sorted(names) for names in groups.values() if len(names) > 1]


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[nn.Module | dict, dict]:
    """(weights, optimizer state) to save, whole and on the CPU; every process must call this (FSDP gathers).

    weights: the model itself when it is not sharded (safetensors' `save_model` stores
    tied tensors once), else its full state dict with tied names sharing one tensor, so
    it is stored the same way. The optimizer state is keyed by parameter name
    (`get_optimizer_state_dict`), the same for one process, DDP and FSDP, so a run
    can be resumed under another parallel mode. Processes other than rank 0 get empty
    dicts under FSDP.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    _reshard(model)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=options)
    if not is_sharded(model):
        return model, optimizer_state
    # a gathered tensor can be a view of a padded buffer (a dim FSDP splits unevenly, a vocabulary of 63 over 2
    # processes), which safetensors refuses to store for tied names: each gets its own storage first
    weights = {name: tensor.clone() for name, tensor in get_model_state_dict(model, options=options).items()}
    for names in tied_names(model):
        if names[0] in weights:
            weights.update({name: weights[names[0]] for name in names})
    return weights, optimizer_state


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, weights: dict[str, torch.Tensor], optimizer_state: dict
) -> None:
    """Load whole (unsharded) weights and optimizer state into a plain, DDP or FSDP model; every process calls this."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    weights = dict(weights)
    for names in tied_names(model):  # safetensors stored one name of each tied group
        present = [name for name in names if name in weights]
        if present:
            weights.update({name: weights[present[0]] for name in names})
    _reshard(model)
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, weights, options=options)
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=options)
