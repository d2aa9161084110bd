"""torch.distributed for ``torchrun`` (NCCL on GPUs, gloo on CPU; a no-op for a single process), the one
predicate every module asks ("are we running distributed?"), and the device helper."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: torch.device) -> DistInfo:
    """Join the process group torchrun describes in the environment (RANK, WORLD_SIZE, LOCAL_RANK)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=dist.get_rank(), local_rank=int(os.environ.get("LOCAL_RANK", "0")), world_size=dist.get_world_size())


def is_distributed() -> bool:
    """Whether this process is one rank of an initialised torch.distributed group."""
    return dist.is_available() and dist.is_initialized()


def teardown() -> None:
    if is_distributed():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` in place over the ranks (a no-op for a single process)."""
    if is_distributed():
        dist.all_reduce(t)
    return t


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """"auto": CUDA when present (the local rank's GPU under torchrun), else CPU."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", local_rank)))
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use --device cpu or auto")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", local_rank)))
    return dev
