"""Pack the images a benchmark reads into one small file, for a machine that has no copy of the data sets
(a lent GPU): the JPEG files' own bytes for CIFAR-10's JPEG tree, lossless PNG for the rest. Reading the pack
gives exactly the tensors ``vqwae.data.load_splits`` gives (the pack is checked against them when written).

    .venv/bin/python benchmarks/device_pack.py --dataset cifar10 --out .gpudata/cifar10.pt
    .venv/bin/python benchmarks/hosts.py --pack .gpudata/cifar10.pt ...       # then on that machine
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.utils.data import TensorDataset
from torchvision.io import decode_image, encode_png

from vqwae.data import load_splits


def _jpeg_rows(root: Path, sub: str, rows: int) -> list[torch.Tensor] | None:
    """The first ``rows`` JPEG files of a CIFAR-10 split in the loader's order, or None for another layout."""
    from vqwae.data.cifar10 import CLASSES, _jpeg_dir
    from vqwae.data.images import scan_class_tree

    folder = _jpeg_dir(root)
    if folder is None:
        return None
    files, _, _ = scan_class_tree(folder / sub, classes=CLASSES)
    return [torch.frombuffer(bytearray(Path(f).read_bytes()), dtype=torch.uint8) for f in files[:rows]]


def write_pack(dataset: str, root: str, train_rows: int, test_rows: int, out: Path) -> None:
    splits = load_splits(dataset, root, train_limit=train_rows, eval_limit=test_rows)
    want = {s: torch.stack([getattr(splits, s)[i][0] for i in range(len(getattr(splits, s)))]) for s in ("train", "test")}
    pack = dict(dataset=dataset)
    for split, rows in (("train", train_rows), ("test", test_rows)):
        jpeg = _jpeg_rows(Path(root), split, rows) if dataset == "cifar10" else None
        items = jpeg if jpeg is not None else [
            encode_png((img * 255).round().to(torch.uint8), compression_level=9) for img in want[split]]
        # one byte tensor and the items' lengths: a list of small tensors costs ~0.5 kB each in a torch file
        pack[split] = (torch.cat(items), torch.tensor([len(b) for b in items]))
        if not torch.equal(_decode(pack[split]), want[split]):
            raise SystemExit(f"error: the packed {split} images differ from load_splits'")
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(pack, out)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB, {train_rows} train / {test_rows} test images")


def _decode(packed: tuple[torch.Tensor, torch.Tensor], rows: int | None = None) -> torch.Tensor:
    data, lengths = packed
    items = data.split(lengths.tolist())[:rows]
    return torch.stack([decode_image(b).float() / 255 for b in items])


def read_pack(path: str, dataset: str, train_rows: int, test_rows: int) -> tuple[TensorDataset, torch.Tensor]:
    """(train as a data set of (image,) items, test images (N, C, H, W)) in [0, 1]."""
    pack = torch.load(path)
    n_train, n_test = len(pack["train"][1]), len(pack["test"][1])
    if pack["dataset"] != dataset or n_train < train_rows or n_test < test_rows:
        raise SystemExit(f"error: {path} holds {pack['dataset']} ({n_train} / {n_test} images), "
                         f"not {dataset} ({train_rows} / {test_rows})")
    return TensorDataset(_decode(pack["train"], train_rows)), _decode(pack["test"], test_rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="cifar10")
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    write_pack(args.dataset, args.data_root, args.train, args.test, args.out)


if __name__ == "__main__":
    main()
