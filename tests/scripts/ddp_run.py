"""Run by ``tests/test_ddp.py`` under ``torchrun --nproc_per_node 2`` (gloo, CPU): every path where DDP ranks can
run different numbers of collectives, one part per launch (a process joins one process group, as a user's
``torchrun ... vqwae train`` does). Each rank writes a digest of its weights to OUT/PART.rankR.

    python -m torch.distributed.run --nproc_per_node 2 tests/scripts/ddp_run.py PART OUT DATA_ROOT
"""
import hashlib
import os
import sys
from pathlib import Path

import torch

from vqwae.quantizers import ResidualQuantizer, WassersteinQuantizer
from vqwae.runs.codes import encode_to_file
from vqwae.training import TrainConfig, train

part, out, data_root = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
rank = int(os.environ["RANK"])
torch.set_num_threads(1)


def digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode() + t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def record(part: str, module: torch.nn.Module) -> None:
    (out / f"{part}.rank{rank}").write_text(digest(module))


# train: validation shares that are uneven (513 images at 256 per batch: 2 batches on rank 0, 1 on rank 1);
# resume: the same run resumed for a second epoch (rank 0 wrote the state; every rank reads it)
options = dict(dataset="mnist", data_root=data_root, train_limit=256, eval_limit=513, batch_size=32,
               num_codes=32, device="cpu", threads=1)
if part == "train":
    result = train(TrainConfig.resolve(out=str(out / "run"), epochs=1, max_steps=4, **options))
    record(part, result.model)
elif part == "resume":
    result = train(TrainConfig.resolve(out=str(out / "run"), epochs=2, max_steps=8, **options), resume=True)
    record(part, result.model)
elif part == "encode":  # shares that differ in batch count (5 and 4 images in batches of 2)
    encode_to_file(out / "run", out / "codes.safetensors", split="test", limit=9, batch_size=2, data_root=data_root)
if part != "residual":
    sys.exit(0)
# residual: a stack with quantizer dropout; every rank must use the same number of levels in each step (the
# Wasserstein levels all-reduce their statistics, level by level)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.ModuleDict(dict(
    enc=torch.nn.Linear(4, 8),
    rq=ResidualQuantizer(lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True), 4, dropout=True),
    dec=torch.nn.Linear(8, 4)))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)
levels = []
for step in range(12):
    x = torch.randn(8, 16, 4, generator=g)
    rq_out = model["rq"](model["enc"](x))
    levels.append(rq_out.levels_used)
    loss = torch.nn.functional.mse_loss(model["dec"](rq_out.quantized), x) + rq_out.loss
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():  # DDP's gradient all-reduce, by hand (a level a step leaves out has no gradient)
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2
    opt.step()
(out / f"levels.rank{rank}").write_text(",".join(map(str, levels)))
record("residual", model)
dist.destroy_process_group()
