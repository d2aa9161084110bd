"""Tests of vqwae.data: real MNIST / CIFAR-10 JPEG from shared/ when present, and every other
layout on tiny files written here in the real on-disk format. CPU only, fast."""
from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vqwae.data import (DATASETS, CorruptImageError, DatasetInfo, DatasetNotFoundError,
                        ImageTensorDataset, load_splits)
from vqwae.data import images as images_mod
from vqwae.data.cifar10 import CLASSES as CIFAR_CLASSES


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path, monkeypatch):
    """Every test gets its own empty dataset cache folder."""
    monkeypatch.setenv("VQWAE_CACHE", str(tmp_path / "cache"))
    yield


def cache_files(tmp_path: Path) -> list[Path]:
    d = tmp_path / "cache"
    return sorted(d.glob("*.pt")) if d.is_dir() else []


def check_split(ds, n, shape):
    assert len(ds) == n
    if n:
        x, y = ds[0]
        assert x.dtype == torch.float32 and tuple(x.shape) == shape
        assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
        assert int(y) == y and torch.as_tensor(y).dtype == torch.int64


def solid(color, size=(32, 32)) -> Image.Image:
    return Image.new("RGB", size, tuple(int(c) for c in color))


def color_of(i: int) -> tuple[int, int, int]:
    """Well separated colours so decoded (lossy) images can be told apart."""
    return (20 + 40 * (i % 6), 20 + 40 * ((i // 6) % 6), 20 + 40 * ((i // 36) % 6))


def mean_color(x: torch.Tensor) -> tuple[int, int, int]:
    return tuple(int(round(v)) for v in (x.mean(dim=(1, 2)) * 255).tolist())


def close(a, b, tol=6):
    return all(abs(p - q) <= tol for p, q in zip(a, b))


# ---------------------------------------------------------------- registry & errors

def test_dataset_names_and_unknown_name():
    assert set(DATASETS) == {"mnist", "fashionmnist", "kmnist", "cifar10", "svhn", "celeba", "ffhq", "celebahq",
                            "imagefolder", "digits"}
    with pytest.raises(ValueError) as e:
        load_splits("cifar100", "/nowhere")
    for name in DATASETS:
        assert name in str(e.value)


@pytest.mark.parametrize("name", [n for n in DATASETS if n != "digits"])
def test_missing_path_error_is_helpful(name, tmp_path):
    missing = tmp_path / "no_such_dir"
    with pytest.raises(DatasetNotFoundError) as e:
        load_splits(name, missing)
    msg = str(e.value)
    assert isinstance(e.value, FileNotFoundError)
    assert str(missing) in msg
    assert "Accepted layouts" in msg and "ROOT/" in msg
    assert "--data-root" in msg or "root" in msg
    if name not in ("imagefolder", "ffhq", "celebahq"):  # those have no automatic download
        assert "download=True" in msg


def test_bad_limits_rejected():
    with pytest.raises(ValueError):
        load_splits("digits", None, train_limit=-1)
    with pytest.raises(ValueError):
        load_splits("digits", None, image_size=0)


# ---------------------------------------------------------------- digits (no files)

def test_digits_splits_shapes_and_determinism():
    s = load_splits("digits", None)
    assert s.info == DatasetInfo("digits", 1, 32, 10)
    check_split(s.train, 1397, (1, 32, 32))
    check_split(s.val, 200, (1, 32, 32))
    check_split(s.test, 200, (1, 32, 32))
    assert float(s.train.images.max()) == pytest.approx(1.0, abs=0.07)
    again = load_splits("digits", "ignored", seed=0)
    assert torch.equal(again.train.images, s.train.images)
    assert torch.equal(again.test.labels, s.test.labels)
    other = load_splits("digits", None, seed=1)
    assert not torch.equal(other.test.images, s.test.images)
    # splits are a partition of the 1,797 images
    allx = torch.cat([s.train.images, s.val.images, s.test.images]).flatten(1)
    assert allx.shape[0] == 1797
    lim = load_splits("digits", None, train_limit=10, eval_limit=3, image_size=16)
    assert [len(d) for d in lim] == [10, 3, 3] and lim.train[0][0].shape == (1, 16, 16)
    assert torch.equal(lim.train.labels, s.train.labels[:10])


def test_dataloader_and_get_batch():
    s = load_splits("digits", None, train_limit=32)
    x, y = next(iter(torch.utils.data.DataLoader(s.train, batch_size=8)))
    assert x.shape == (8, 1, 32, 32) and y.dtype == torch.int64
    bx, by = s.train.get_batch(torch.arange(8))
    assert torch.equal(bx, x) and torch.equal(by, y)


# ---------------------------------------------------------------- MNIST

def test_mnist_real(shared_data):
    s = load_splits("mnist", shared_data)
    assert s.info == DatasetInfo("mnist", 1, 32, 10)
    check_split(s.train, 50000, (1, 32, 32))
    check_split(s.val, 10000, (1, 32, 32))
    check_split(s.test, 10000, (1, 32, 32))
    assert int(s.train[0][1]) == 5 and int(s.test[0][1]) == 7  # the well-known first labels
    from vqwae.data.mnist import read_idx
    raw_y = read_idx(shared_data / "MNIST" / "raw" / "train-labels-idx1-ubyte")
    assert torch.equal(s.val.labels, raw_y[50000:].long())
    lim = load_splits("mnist", shared_data / "MNIST", train_limit=7, eval_limit=3)
    assert [len(d) for d in lim] == [7, 3, 3]
    assert torch.equal(lim.train.images, s.train.images[:7])
    assert torch.equal(lim.val.images, s.val.images[:3])


def write_idx(path: Path, arr: np.ndarray, gz: bool = False):
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def test_mnist_tiny_idx_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tr_x, te_x = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 256, (4, 28, 28))
    write_idx(raw / "train-images-idx3-ubyte", tr_x, gz=True)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(12) % 10)
    write_idx(raw / "t10k-images-idx3-ubyte", te_x)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(4))
    s = load_splits("mnist", raw, image_size=28)  # ROOT = the raw folder itself; no resize
    assert [len(d) for d in s] == [10, 2, 4]  # val = last n // 6
    assert torch.equal(s.train.images[:, 0], torch.as_tensor(tr_x[:10], dtype=torch.uint8))
    assert s.val.labels.tolist() == [0, 1]
    (raw / "t10k-images-idx3-ubyte").write_bytes(b"garbage")
    with pytest.raises(DatasetNotFoundError, match="t10k-images-idx3-ubyte"):
        load_splits("mnist", tmp_path)



@pytest.mark.parametrize("name, folder", [("fashion-mnist", "FashionMNIST"), ("KMNIST", "KMNIST")])
def test_mnist_siblings_in_torchvision_layouts(tmp_path, name, folder):
    raw = tmp_path / folder / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    tr_x, te_x = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 256, (4, 28, 28))
    write_idx(raw / "train-images-idx3-ubyte", tr_x, gz=True)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(12) % 10, gz=True)
    write_idx(raw / "t10k-images-idx3-ubyte", te_x)
    write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(4))
    s = load_splits(name, tmp_path, image_size=28)  # ROOT holds <Folder>/raw, as torchvision writes it
    assert [len(d) for d in s] == [10, 2, 4]
    assert s.info.name == folder.lower() and s.info.channels == 1 and s.info.num_classes == 10
    assert torch.equal(s.test.images[:, 0], torch.as_tensor(te_x, dtype=torch.uint8))
    with pytest.raises(DatasetNotFoundError, match=f"{folder}/raw"):
        load_splits(name, tmp_path / "MNIST")  # a sibling's files are not taken for another's


# ---------------------------------------------------------------- CIFAR-10

def test_cifar10_real_jpeg(shared_data, tmp_path):
    s = load_splits("cifar10", shared_data, train_limit=20, eval_limit=10)
    assert s.info == DatasetInfo("cifar10", 3, 32, 10)
    check_split(s.train, 20, (3, 32, 32))
    check_split(s.val, 10, (3, 32, 32))
    check_split(s.test, 10, (3, 32, 32))
    assert s.train.labels.tolist() == list(range(10)) * 2  # classes interleaved
    root = shared_data / "cifar10-jpeg"
    ref = lambda p: torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1)  # noqa: E731
    assert torch.equal(s.train.images[0], ref(root / "train/airplane/0000.jpg"))
    assert torch.equal(s.train.images[13], ref(root / "train/cat/0001.jpg"))
    assert torch.equal(s.val.images[1], ref(root / "train/automobile/4000.jpg"))
    assert torch.equal(s.test.images[9], ref(root / "test/truck/0000.jpg"))
    assert cache_files(tmp_path) == []  # limited loads decode only what they need, cache nothing


def write_cifar_tree(root: Path, n_train=5, n_test=2, classes=("airplane", "bird", "cat")):
    k = 0
    for split, n in (("train", n_train), ("test", n_test)):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                solid(color_of(k)).save(d / f"{i:04d}.jpg", quality=95)
                k += 1


def test_cifar10_tiny_jpeg_tree_and_cache(tmp_path, monkeypatch):
    root = tmp_path / "cifar"
    write_cifar_tree(root)
    s = load_splits("cifar10", root)
    # 15 train images -> val = last 15 // 5 = 3, labels are CIFAR-10 indices of the names
    assert [len(d) for d in s] == [12, 3, 6]
    assert s.train.labels[:6].tolist() == [0, 2, 3, 0, 2, 3]
    assert s.val.labels.tolist() == [0, 2, 3]
    # interleaved: train[1] is bird/0000.jpg, the 6th image written (k = 5)
    assert close(mean_color(s.train[1][0]), color_of(5))
    assert len(cache_files(tmp_path)) == 2  # one for train/, one for test/

    # a second load reads the cache: no decoding at all
    def boom(*a, **k):
        raise AssertionError("decoded although a valid cache exists")
    monkeypatch.setattr(images_mod, "decode_files", boom)
    s2 = load_splits("cifar10", root)
    assert torch.equal(s2.train.images, s.train.images) and torch.equal(s2.test.images, s.test.images)
    lim = load_splits("cifar10", root, train_limit=2, eval_limit=1)  # limits also use the cache
    assert torch.equal(lim.val.images, s.val.images[:1])
    monkeypatch.undo()
    monkeypatch.setenv("VQWAE_CACHE", str(tmp_path / "cache"))

    # stale cache: rewrite one file (new content, new mtime) -> re-decoded, old cache replaced
    old_caches = cache_files(tmp_path)
    target = root / "train" / "airplane" / "0000.jpg"
    solid((250, 5, 5)).save(target, quality=95)
    os.utime(target, ns=(1, 1))
    s3 = load_splits("cifar10", root)
    assert close(mean_color(s3.train[0][0]), (250, 5, 5))
    now = cache_files(tmp_path)
    assert len(now) == 2 and len(set(now) & set(old_caches)) == 1  # test/ cache kept, train/ renewed
    # adding a file changes the count and the split sizes
    solid((1, 2, 3)).save(root / "train" / "cat" / "0099.jpg", quality=95)
    assert len(load_splits("cifar10", root).train) == 13


def test_cifar10_corrupt_and_foreign_classes(tmp_path):
    root = tmp_path / "cifar"
    write_cifar_tree(root, n_train=2, n_test=1, classes=("dog",))
    bad = root / "train" / "dog" / "0001.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(CorruptImageError, match="0001.jpg"):
        load_splits("cifar10", root)
    (root / "test" / "dragon").mkdir()
    solid((0, 0, 0)).save(root / "test" / "dragon" / "a.jpg")
    with pytest.raises(DatasetNotFoundError, match="imagefolder"):
        load_splits("cifar10", root, train_limit=1)


def test_cifar10_python_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = {"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8),
             "labels": rng.integers(0, 10, 10).tolist(), "batch_label": name}
        batches[name] = d
        with open(folder / name, "wb") as f:
            pickle.dump(d, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CIFAR_CLASSES}, f)
    write_cifar_tree(tmp_path, n_train=1, n_test=1)  # a JPEG tree too: batches take precedence
    s = load_splits("cifar10", tmp_path)
    assert [len(d) for d in s] == [40, 10, 10]  # val = data_batch_5
    assert torch.equal(s.train.images[0].flatten(), torch.from_numpy(batches["data_batch_1"]["data"][0]))
    assert s.val.labels.tolist() == batches["data_batch_5"]["labels"]
    assert torch.equal(s.test.images.flatten(1), torch.from_numpy(batches["test_batch"]["data"]))
    s2 = load_splits("cifar10", folder, train_limit=3, eval_limit=2, image_size=16)
    assert [len(d) for d in s2] == [3, 2, 2] and s2.train[0][0].shape == (3, 16, 16)
    assert s2.info.image_size == 16


# ---------------------------------------------------------------- SVHN

def test_svhn_mat_files(tmp_path):
    from scipy.io import savemat
    rng = np.random.default_rng(0)
    data = {}
    for split, n in (("train", 20), ("test", 5)):
        x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = (np.arange(n) % 10 + 1).reshape(n, 1).astype(np.uint8)  # 1..10, 10 = digit 0
        savemat(tmp_path / f"{split}_32x32.mat", {"X": x, "y": y})
        data[split] = (x, y)
    s = load_splits("svhn", tmp_path)
    assert s.info == DatasetInfo("svhn", 3, 32, 10)
    assert [len(d) for d in s] == [18, 2, 5]  # val = last 10%
    x, y = data["train"]
    assert torch.equal(s.train.images[3], torch.from_numpy(x[..., 3]).permute(2, 0, 1))
    assert s.train.labels[:10].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]
    assert s.val.labels.tolist() == [9, 0]
    lim = load_splits("svhn", tmp_path, train_limit=4, eval_limit=1)
    assert [len(d) for d in lim] == [4, 1, 1]


# ---------------------------------------------------------------- CelebA

def test_celeba_layout(tmp_path):
    folder = tmp_path / "celeba"
    img_dir = folder / "img_align_celeba"
    img_dir.mkdir(parents=True)
    parts = [0, 1, 0, 2, 0, 1]
    for i in range(6):
        im = solid((255, 255, 255), size=(178, 218))  # W x H of aligned CelebA
        im.paste(solid(color_of(i * 7), size=(140, 140)), (19, 39))  # the center-crop region
        im.save(img_dir / f"{i + 1:06d}.jpg", quality=95)
    (folder / "list_eval_partition.txt").write_text(
        "".join(f"{i + 1:06d}.jpg {p}\n" for i, p in enumerate(parts)))
    for other in ("list_attr_celeba.txt", "identity_CelebA.txt"):  # present but never read
        (folder / other).write_text("junk")
    s = load_splits("celeba", tmp_path)
    assert s.info == DatasetInfo("celeba", 3, 64, None)
    check_split(s.train, 3, (3, 64, 64))
    assert [len(d) for d in s] == [3, 2, 1]
    assert s.train.labels.tolist() == [0, 0, 0]
    for ds, ids in ((s.train, [0, 2, 4]), (s.val, [1, 5]), (s.test, [3])):
        for j, i in enumerate(ids):
            x = ds[j][0]
            assert close(mean_color(x[:, 4:-4, 4:-4]), color_of(i * 7), tol=4)  # white border cropped
    assert len(cache_files(tmp_path)) == 1
    lim = load_splits("celeba", folder, train_limit=1, eval_limit=1, image_size=32)  # ROOT = celeba/
    assert [len(d) for d in lim] == [1, 1, 1] and lim.test[0][0].shape == (3, 32, 32)
    (folder / "list_eval_partition.txt").unlink()
    (folder / "list_eval_partition.csv").write_text(
        "image_id,partition\n" + "".join(f"{i + 1:06d}.jpg,{p}\n" for i, p in enumerate(parts)))
    assert [len(d) for d in load_splits("celeba", tmp_path)] == [3, 2, 1]
    (img_dir / "000004.jpg").unlink()
    with pytest.raises(DatasetNotFoundError, match="000004.jpg"):
        load_splits("celeba", tmp_path)


# ---------------------------------------------------------------- image folders

def test_imagefolder_flat_seeded_split(tmp_path):
    for i in range(20):
        w, h = (40, 24) if i % 2 else (24, 30)  # non-square, varied sizes: crop + resize
        solid(color_of(i), size=(w, h)).save(tmp_path / f"img{i:02d}.png")
    s = load_splits("imagefolder", tmp_path, image_size=16)
    assert s.info == DatasetInfo("imagefolder", 3, 16, None)
    assert [len(d) for d in s] == [16, 2, 2]
    check_split(s.train, 16, (3, 16, 16))
    seen = {mean_color(x) for d in s for x, _ in d}
    assert seen == {color_of(i) for i in range(20)}  # a partition, PNG is lossless
    s2 = load_splits("imagefolder", tmp_path, image_size=16, seed=0)
    assert torch.equal(s2.test.images, s.test.images)
    s3 = load_splits("imagefolder", tmp_path, image_size=16, seed=5)
    assert not torch.equal(s3.train.images, s.train.images)
    assert load_splits("imagefolder", tmp_path).info.image_size == 64  # the default


def test_imagefolder_split_dirs_with_classes(tmp_path):
    for split, n in (("train", 10), ("test", 2)):
        for c, base in (("cats", 0), ("dogs", 50)):
            d = tmp_path / split / c
            d.mkdir(parents=True)
            for i in range(n):
                solid(color_of(base + i), size=(20, 20)).save(d / f"{i}.png")
    s = load_splits("imagefolder", tmp_path, image_size=8)
    assert s.info.num_classes == 2
    assert [len(d) for d in s] == [18, 2, 4]  # val carved: last 10% of a seeded permutation
    assert s.test.labels.tolist() == [0, 1, 0, 1]
    for x, y in s.train:
        assert (int(y) == 1) == (mean_color(x) in {color_of(50 + i) for i in range(10)})
    (tmp_path / "val" / "dogs").mkdir(parents=True)
    solid((9, 9, 9), size=(20, 20)).save(tmp_path / "val" / "dogs" / "x.png")
    s = load_splits("imagefolder", tmp_path, image_size=8, train_limit=5)
    assert [len(d) for d in s] == [5, 1, 4] and s.val.labels.tolist() == [1]


def test_image_dataset_rejects_bad_tensors():
    with pytest.raises(ValueError):
        ImageTensorDataset(torch.zeros(2, 3, 4))
    ds = ImageTensorDataset(torch.full((3, 1, 2, 2), 255, dtype=torch.uint8))
    assert float(ds[0][0].max()) == 1.0 and int(ds[2][1]) == 0


def test_pil_fallback_matches_torchvision(tmp_path):
    """PIL, the decoder where torchvision's image ops are missing, gives the pixels torchvision's give."""
    root = tmp_path / "cifar"
    write_cifar_tree(root, n_train=2, n_test=1)
    files = sorted(root.rglob("*.png")) + sorted(root.rglob("*.jpg"))
    assert files
    for f in files:
        for channels in (1, 3):
            assert torch.equal(images_mod.decode_file(f, channels), images_mod.decode_file(f, channels, "pil")), f


def test_unreadable_cache_is_rebuilt(tmp_path):
    root = tmp_path / "cifar"
    write_cifar_tree(root, n_train=2, n_test=1)
    s = load_splits("cifar10", root)
    for f in cache_files(tmp_path):
        f.write_bytes(b"truncated")
    with pytest.warns(UserWarning, match="unreadable dataset cache"):
        s2 = load_splits("cifar10", root)
    assert torch.equal(s2.train.images, s.train.images)
    assert all(f.stat().st_size > 100 for f in cache_files(tmp_path))
