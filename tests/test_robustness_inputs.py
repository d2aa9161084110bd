"""Odd inputs a new user gives: one line naming the problem, or the right result (issue #58, items 2, 10, 11, 12).

Image folders with link loops and images of every mode, damaged JSON files of a run, devices and sizes that
cannot work, a typo'd run path, weights that hold NaN. Each error case checks that no file of the run changed.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import load_file, save_file

from tests.helpers import TINY, checksums, invoke, one_line_error, tiny_run
from vqwae.data import CodesDataset, load_splits
from vqwae.data.images import list_images, scan_class_tree
from vqwae.models import VQAutoencoder
from vqwae.runs import layout
from vqwae.training import TrainConfig

CPU = ["--device", "cpu", "--threads", "1"]


run = tiny_run("inputs")


def _pngs(folder: Path, n: int, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(folder / f"{seed}_{i:02d}.png")
    return folder


# ---- item 2: link loops ---------------------------------------------------------------------------------
def test_a_link_loop_does_not_multiply_the_images(run, tmp_path):
    folder = _pngs(tmp_path / "two", 2)
    (folder / "again").symlink_to(".")
    (folder / "up").symlink_to("..")
    assert len(list_images(folder)) == 2
    r = invoke(["encode", run, "--images", folder, "--out", tmp_path / "c.safetensors", *CPU])
    assert r.exit_code == 0, r.output
    assert len(CodesDataset(tmp_path / "c.safetensors")) == 2


def test_an_image_folder_with_a_loop_trains_on_its_own_images_once(tmp_path):
    folder = _pngs(tmp_path / "imgs", 24)
    (folder / "again").symlink_to(".")
    splits = load_splits("imagefolder", folder, image_size=16)
    parts = [{s[i][0].numpy().tobytes() for i in range(len(s))} for s in (splits.train, splits.val, splits.test)]
    assert sum(len(s) for s in (splits.train, splits.val, splits.test)) == 24 == len(set.union(*parts))


def test_class_folders_linked_twice_or_to_the_root_count_once(tmp_path):
    root = tmp_path / "classes"
    _pngs(root / "cat", 3, seed=1)
    _pngs(root / "dog", 2, seed=2)
    (root / "dog" / "loop").symlink_to("..")  # a link up, inside a class
    (root / "kitten").symlink_to("cat")  # a second name of a class folder
    (root / "again").symlink_to(".")
    files, labels, classes = scan_class_tree(root)
    assert classes == ["cat", "dog"] and len(files) == 5 and sorted(labels) == [0, 0, 0, 1, 1]


# ---- item 10: images of every mode, GIFs among PNGs -----------------------------------------------------
def test_images_of_every_mode_are_converted_to_the_models_channels(run, tmp_path):
    folder = _pngs(tmp_path / "modes", 2)
    rgb = Image.fromarray(np.random.default_rng(3).integers(0, 255, (12, 12, 3), dtype=np.uint8))
    rgb.convert("P").save(folder / "palette.gif")
    frames = [rgb.convert("P"), rgb.rotate(90).convert("P")]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:])
    rgb.convert("RGBA").save(folder / "alpha.png")
    rgb.convert("P").save(folder / "palette.png")
    rgb.convert("1").save(folder / "onebit.png")
    rgb.convert("CMYK").save(folder / "cmyk.jpg")
    Image.fromarray(np.asarray(rgb)[..., 0].astype(np.uint16) * 257).save(folder / "sixteen.png")
    for images in (folder, folder / "animated.gif"):  # all together, and a GIF alone
        out = tmp_path / f"{Path(images).name}.safetensors"
        r = invoke(["encode", run, "--images", images, "--out", out, *CPU])
        assert r.exit_code == 0, r.output
    assert len(CodesDataset(tmp_path / "modes.safetensors")) == 9


# ---- item 10 / 11: damaged files of a run ------------------------------------------------------------------
DAMAGED = {  # file: (content, words the error must hold)
    "config.json []": ("config.json", "[]", ["config.json", "list"]),
    "config.json garbage": ("config.json", "{'epochs': 3,", ["config.json", "not JSON"]),
    "config.json of a wrong shape": ("config.json", '{"format_version": 2, "run": 5}', ["config.json"]),
    "model_config.json null": ("model_config.json", "null", ["model_config.json", "null"]),
    "model_config.json garbage": ("model_config.json", "{", ["model_config.json", "not JSON"]),
    "model_config.json format 99": ("model_config.json", None, ["format_version 99", "upgrade"]),
}
COMMANDS = {
    "eval": lambda r, t: ["eval", r, "--no-fid", "--no-lpips", "--limit", "8", *CPU],
    "probe": lambda r, t: ["probe", r, "--limit", "8", *CPU],
    "tsne": lambda r, t: ["tsne", r, "--n", "8", *CPU],
    "encode": lambda r, t: ["encode", r, "--out", t / "c.safetensors", "--limit", "4", *CPU],
    "train --resume": lambda r, t: ["train", "--out", r, "--resume", "--epochs", "2"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_run_file_is_one_line_naming_it(run, tmp_path, case, command):
    name, text, needles = DAMAGED[case]
    if command == "train --resume" and name == "model_config.json":
        pytest.skip("training reads no model_config.json (it writes it)")
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    if text is None:
        text = json.dumps({**json.loads((bad / name).read_text()), "format_version": 99})
    (bad / name).write_text(text)
    before = checksums(bad)
    one_line_error(invoke(COMMANDS[command](bad, tmp_path)), *needles)
    assert checksums(bad) == before


def test_from_pretrained_names_a_damaged_config(run, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (bad / "model_config.json").write_text("null")
    with pytest.raises(ValueError, match="model_config.json"):
        VQAutoencoder.from_pretrained(bad)


@pytest.mark.parametrize("command", ["eval", "probe", "tsne"])
def test_a_garbage_eval_json_is_kept_aside_and_does_not_block(run, tmp_path, command):
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (bad / "eval.json").write_text("{not json")
    r = invoke(COMMANDS[command](bad, tmp_path))
    assert r.exit_code == 0, r.output
    assert (bad / "eval.json.damaged").read_text() == "{not json"  # the user's bytes are kept
    assert json.loads((bad / "eval.json").read_text())
    (bad / "eval.json").write_text("[1]")
    with pytest.raises(ValueError, match="eval.json"):  # a reader that only reads names the file
        layout.read_eval(bad)


# ---- items 10, 11, 12: impossible requests ------------------------------------------------------------------
def _nan_codebook(run: Path, tmp: Path) -> Path:
    bad = tmp / "nan"
    shutil.copytree(run, bad)
    state = load_file(str(bad / "model.safetensors"))
    key = next(k for k in state if "embedding" in k or "codebook" in k)
    state[key][0, 0] = float("nan")
    save_file(state, str(bad / "model.safetensors"), metadata={"format": "pt"})
    return bad


IMPOSSIBLE = {
    "prior train --out a file": (lambda r, t: ["prior", "train", r, "--out", r / "config.json", *CPU],
                                 ["is a file"]),
    "prior train --out 300 characters": (lambda r, t: ["prior", "train", r, "--out", t / ("p" * 300), "--epochs", "1",
                                                       "--max-steps", "1", "--hidden", "8", "--layers", "2", *CPU],
                                         ["cannot write", "too long"]),
    "train --num-codes 10^12": (lambda r, t: ["train", "--out", t / "a", *TINY[:-4], "--num-codes", str(10 ** 12),
                                              "--device", "cpu"], ["num_codes", "<= 1048576"]),
    "train --lr inf": (lambda r, t: ["train", "--out", t / "a", *TINY, "--lr", "inf"], ["lr", "finite"]),
    "train --ws-weight inf": (lambda r, t: ["train", "--out", t / "a", *TINY, "--ws-weight", "inf"],
                              ["ws_weight", "finite"]),
    "train --device meta": (lambda r, t: ["train", "--out", t / "a", *TINY[:-2], "--device", "meta"], ["meta"]),
    "eval --device meta": (lambda r, t: ["eval", r, "--device", "meta"], ["meta"]),
    "encode --device meta": (lambda r, t: ["encode", r, "--out", t / "c", "--device", "meta"], ["meta"]),
    "probe on a NaN codebook": (lambda r, t: ["probe", _nan_codebook(r, t), "--limit", "8", *CPU],
                                ["non-finite", "model.safetensors"]),
    "eval on a NaN codebook": (lambda r, t: ["eval", _nan_codebook(r, t), "--no-fid", "--no-lpips", *CPU],
                               ["non-finite"]),
    "encode with a NaN codebook": (lambda r, t: ["encode", _nan_codebook(r, t), "--out", t / "c", *CPU],
                                   ["non-finite"]),
    "decode from runs/nope": (lambda r, t: ["decode", t / "nope", r / "model.safetensors", "--out", t / "d", *CPU],
                              ["no such run folder"]),
    "encode --images --split": (lambda r, t: ["encode", r, "--images", r, "--split", "train", "--out", t / "c"],
                                ["--split", "--images"]),
}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_an_impossible_request_is_one_line(run, tmp_path, case):
    build, needles = IMPOSSIBLE[case]
    before = checksums(run)
    one_line_error(invoke(build(run, tmp_path)), *needles)
    assert checksums(run) == before
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_a_local_looking_path_is_not_taken_for_a_hub_repo(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such run folder"):
        VQAutoencoder.from_pretrained("runs/nope")


def test_encode_takes_the_split_as_the_run_defined_it(run, tmp_path):
    r = invoke(["encode", run, "--split", "train", "--out", tmp_path / "c.safetensors", *CPU])
    assert r.exit_code == 0, r.output
    assert len(CodesDataset(tmp_path / "c.safetensors")) == 64  # the run's train_limit, as prior train reads it


def test_a_preset_in_a_config_file_is_applied_as_preset_is(tmp_path):
    """(item 3, fixed in TrainConfig.resolve): ``preset: paper`` in --config trains what --preset paper trains."""
    (tmp_path / "c.yaml").write_text("preset: paper\n")
    from_file = TrainConfig.resolve(config_file=tmp_path / "c.yaml", out="x").to_flat()
    assert from_file == TrainConfig.resolve(preset="paper", out="x").to_flat()
    assert from_file != TrainConfig.resolve(out="x").to_flat()
