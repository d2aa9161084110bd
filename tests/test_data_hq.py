"""FFHQ and CelebA-HQ in their distributed layouts, with tiny images: splits by number, sizes, errors."""
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from vqwae.data import DatasetNotFoundError, load_splits


def write(path: Path, value: int, size=(24, 16)):
    """A solid image whose grey level encodes ``value`` (so a test can tell which file an item came from)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (value, value, value)).save(path)


def grey(x: torch.Tensor) -> int:
    return round(float(x.mean()) * 255)


FFHQ_NUMBERS = [0, 1, 59_999, 60_000, 64_999, 65_000, 69_999]


def test_ffhq_official_layout_splits_by_number(tmp_path):
    for i, n in enumerate(FFHQ_NUMBERS):  # the official 1024 tree: images1024x1024/NNN00/NNNNN.png
        write(tmp_path / "images1024x1024" / f"{n // 1000 * 1000:05d}" / f"{n:05d}.png", 10 * i + 5)
    s = load_splits("ffhq", tmp_path, image_size=8)
    assert (len(s.train), len(s.val), len(s.test)) == (3, 2, 2)
    assert [grey(s.train[i][0]) for i in range(3)] == [5, 15, 25]  # 00000, 00001, 59999 in number order
    assert [grey(s.val[i][0]) for i in range(2)] == [35, 45] and [grey(s.test[i][0]) for i in range(2)] == [55, 65]
    x, y = s.train[0]
    assert x.shape == (3, 8, 8) and x.dtype == torch.float32 and int(y) == 0  # center square, resized
    assert s.info.name == "ffhq" and s.info.image_size == 8 and s.info.num_classes is None
    batch, _ = next(iter(DataLoader(s.train, batch_size=3)))
    assert batch.shape == (3, 3, 8, 8)
    s = load_splits("ffhq", tmp_path, image_size=8, train_limit=1, eval_limit=1)
    assert (len(s.train), len(s.val), len(s.test)) == (1, 1, 1)


def test_ffhq_reads_the_smallest_copy_at_least_as_large_as_asked(tmp_path):
    for n in (0, 60_000, 65_000):
        write(tmp_path / "images1024x1024" / f"{n:05d}.png", 200)
        write(tmp_path / "thumbnails128x128" / f"{n:05d}.png", 100)
    assert grey(load_splits("ffhq", tmp_path, image_size=64).train[0][0]) == 100  # 128 >= 64: thumbnails
    assert grey(load_splits("ffhq", tmp_path, image_size=256).train[0][0]) == 200  # 128 < 256: the full images
    assert load_splits("ffhq", tmp_path).info.image_size == 256  # the paper's size by default


def test_ffhq_flat_export_and_its_errors(tmp_path):
    flat = tmp_path / "ffhq256"
    for n in (3, 60_003, 65_003):
        write(flat / f"{n:05d}.jpg", 50)
    assert len(load_splits("ffhq", tmp_path, image_size=8).train) == 1
    write(flat / "notes.png", 0)
    with pytest.raises(DatasetNotFoundError, match="notes.png is not named by its image number"):
        load_splits("ffhq", tmp_path, image_size=8)
    (flat / "notes.png").unlink()
    (flat / "65003.jpg").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"no images numbered 65000-69999 \(test split\)"):
        load_splits("ffhq", tmp_path, image_size=8)


def test_celebahq_numbered_layout_and_official_partition(tmp_path):
    for n in (0, 23_999, 24_000, 27_000, 29_999):
        write(tmp_path / "CelebA-HQ-img" / f"{n}.jpg", n % 251)
    s = load_splits("celebahq", tmp_path, image_size=8)
    assert (len(s.train), len(s.val), len(s.test)) == (2, 1, 2)  # 80 / 10 / 10 by number
    # with the HQ -> CelebA mapping and CelebA's partition file, each image takes its source photo's partition
    (tmp_path / "CelebA-HQ-to-CelebA-mapping.txt").write_text(
        "idx orig_idx orig_file\n0 1 000002.jpg\n23999 2 000003.jpg\n24000 3 000004.jpg\n"
        "27000 4 000005.jpg\n29999 5 000006.jpg\n")
    (tmp_path / "list_eval_partition.txt").write_text(
        "000002.jpg 2\n000003.jpg 0\n000004.jpg 0\n000005.jpg 1\n000006.jpg 0\n")
    s = load_splits("celebahq", tmp_path, image_size=8)
    assert (len(s.train), len(s.val), len(s.test)) == (3, 1, 1)
    assert grey(s.test[0][0]) == 0 and grey(s.val[0][0]) == 27_000 % 251


def test_celebahq_stargan_layout_has_gender_labels(tmp_path):
    root = tmp_path / "celeba_hq"
    for split, n in (("train", 3), ("val", 2)):
        for c, cls in enumerate(("female", "male")):
            for i in range(n):
                write(root / split / cls / f"{i:06d}.jpg", 100 + c)
    for where in (tmp_path, root):  # ROOT holding celeba_hq/, or celeba_hq itself
        s = load_splits("celebahq", where, image_size=8)
        assert (len(s.train), len(s.val), len(s.test)) == (6, 2, 2)
        assert s.info.num_classes == 2
        assert [int(s.val[i][1]) for i in range(2)] == [0, 1]  # classes interleaved, so each half has both
        assert all(grey(x) == 100 + int(y) for x, y in s.train)


def test_celebahq_missing_layout_names_both(tmp_path):
    (tmp_path / "something").mkdir()
    with pytest.raises(DatasetNotFoundError) as e:
        load_splits("celebahq", tmp_path)
    assert "CelebA-HQ-img" in str(e.value) and "celeba_hq" in str(e.value)


def test_ffhq_under_a_data_root_and_not_mistaken_for_a_class_tree(tmp_path):
    for n in (0, 1):  # a CIFAR-like class tree of numbered JPEGs is not FFHQ
        write(tmp_path / "cifar10-jpeg" / "train" / "cat" / f"{n:04d}.jpg", 10)
    with pytest.raises(DatasetNotFoundError, match="no image files found"):
        load_splits("ffhq", tmp_path)
    for n in (0, 60_000, 65_000):
        write(tmp_path / "ffhq" / "thumbnails128x128" / f"{n:05d}.png", 77)
    assert grey(load_splits("ffhq", tmp_path, image_size=8).test[0][0]) == 77
