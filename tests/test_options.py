"""The one list of options: every option declared once, reachable by flag and config file, typed, versioned."""
import json
import subprocess
import sys

import pytest
import torch

from vqwae.data import load_split, load_splits
from vqwae.options import coerce, leaves
from vqwae.quantizers import WassersteinOptions
from vqwae.runs.layout import read_config, resume_config
from vqwae.training import TrainConfig
from vqwae.training.config import FORMAT_VERSION, load_config_file


def test_every_option_has_one_flat_name_a_help_and_a_flag():
    names = [leaf.flat for leaf in leaves(TrainConfig)]
    assert len(names) == len(set(names))
    assert all(leaf.help for leaf in leaves(TrainConfig))
    # a method's options reach the training config without being listed anywhere else; --help-all lists them all
    assert {f"{leaf.flat}" for leaf in leaves(WassersteinOptions)} <= set(names)
    helptext = subprocess.run([sys.executable, "-m", "vqwae", "train", "--help-all"], capture_output=True, text=True,
                              env={"COLUMNS": "250", "PATH": ""}).stdout
    for name in names:
        if name not in ("out", "preset"):  # --out and --preset are the command's own options
            assert f"--{name.replace('_', '-')}" in helptext, name
    assert "[default: 0.003]" in helptext  # defaults shown, from the declaration
    assert "'paper-fast'" in helptext and "'default'" in helptext  # every preset is named
    evalhelp = subprocess.run([sys.executable, "-m", "vqwae", "eval", "--help"], capture_output=True, text=True,
                              env={"COLUMNS": "250", "PATH": ""}).stdout
    assert "CPU threads (default: env VQWAE_THREADS" in evalhelp  # hand-written help survives rich's markup


def test_values_are_coerced_by_type_or_rejected_naming_the_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("lr: 5e-4\nnum_codes: '64'\nlearn_pi: 'no'\nmax_steps: null\n")  # YAML reads 5e-4 as a string
    cfg = TrainConfig.resolve(config_file=f)
    assert (cfg.optim.lr, cfg.quantizer.num_codes, cfg.quantizer.vqwae.learn_pi) == (5e-4, 64, False)
    for text, key in (("epochs: ten\n", "epochs"), ("batch_size: 32.5\n", "batch_size")):
        f.write_text(text)
        with pytest.raises(ValueError, match=f"{key}: .* is not an integer"):
            TrainConfig.resolve(config_file=f)
    with pytest.raises(ValueError, match="ws_weight must be >= 0"):
        TrainConfig.resolve(ws_weight=-1.0)
    assert coerce("none", int | None, "x") is None


def test_flat_and_nested_config_files_are_the_same_config(tmp_path):
    flat, nested = tmp_path / "flat.yaml", tmp_path / "nested.json"
    flat.write_text("ws_weight: 1.0e-3\nepochs: 7\ndataset: digits\n")
    nested.write_text(json.dumps({"quantizer": {"vqwae": {"ws_weight": 1e-3}}, "optim": {"epochs": 7},
                                  "data": {"dataset": "digits"}}))
    assert TrainConfig.resolve(config_file=flat) == TrainConfig.resolve(config_file=nested)
    assert load_config_file(nested)["quantizer.vqwae.ws_weight"] == 1e-3


def test_config_json_versions_and_resume_rules(tmp_path):
    cfg = TrainConfig.resolve(dataset="digits", num_codes=32, out=str(tmp_path))
    saved = cfg.to_dict()
    assert saved["format_version"] == FORMAT_VERSION and saved["quantizer"]["num_codes"] == 32
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert read_config(tmp_path) == cfg
    assert resume_config(tmp_path, {"epochs": 3, "num_codes": None}).optim.epochs == 3  # schedule may change
    with pytest.raises(ValueError, match="differ from it: lr"):
        resume_config(tmp_path, {"lr": 0.5})
    newer = dict(saved, format_version=FORMAT_VERSION + 1)
    (tmp_path / "config.json").write_text(json.dumps(newer))
    with pytest.raises(ValueError, match="newer vqwae"):
        read_config(tmp_path)


def test_load_split_is_the_split_of_load_splits():
    both = load_splits("digits", None, train_limit=40, eval_limit=30, seed=3)
    for split, n in (("train", 40), ("val", 30), ("test", 30)):
        one, info = load_split("digits", None, split, limit=n, seed=3)
        assert torch.equal(one.images, getattr(both, split).images) and info == both.info
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        load_split("digits", None, "dev")


def _another_value(leaf):
    """A valid value of ``leaf`` other than its default, or None where none is simple to make."""
    d, meta = leaf.default, leaf.field.metadata
    if meta.get("choices"):
        return next((c for c in meta["choices"] if c != d), None)
    if isinstance(d, bool):
        return not d
    if isinstance(d, int):
        return d + 1 if meta.get("max") is None or d + 1 <= meta["max"] else d - 1
    if isinstance(d, float):
        below = meta.get("below") or meta.get("max")
        return d / 2 if below is not None and d > 0 else d + 0.5
    if d is None and leaf.flat in ("data_root", "lpips_weights", "preset"):
        return "x"
    if isinstance(d, str) and leaf.flat in ("out",):
        return "elsewhere"
    return None


@pytest.mark.parametrize("base", [dict(), dict(model="vqvae"), dict(arch="vqgan")])
def test_each_options_declared_role_decides_the_run_key_and_the_resume_rule(base):
    """One declaration (``option(role=...)``) drives both rules: changing an option changes the run's cache key iff
    it is a WHAT or SCHEDULE option the configuration reads, and a resume may change it iff it is SCHEDULE or
    WHERE. Every option is tried, so a new one lands in the right rules by its declaration alone."""
    from vqwae.options import SCHEDULE, WHAT, WHERE
    from vqwae.reproduce.runner import run_key
    from vqwae.runs.layout import RESUME_CHANGEABLE

    cfg = TrainConfig.resolve(**base)
    tried = 0
    for leaf in leaves(TrainConfig):
        value = _another_value(leaf)
        if value is None or leaf.flat in base:
            continue
        try:
            changed = cfg.replace(**{leaf.flat: value})
        except ValueError:
            continue  # a value the option's own checks refuse (e.g. a coupled option)
        tried += 1
        # read by either (an option may be unread at its "off" value only: potential_steps=1)
        read = not all(any(leaf.path[: len(p)] == p for p in c.unread()) for c in (cfg, changed))
        assert (run_key(changed) != run_key(cfg)) == (leaf.role in (WHAT, SCHEDULE) and read), leaf.flat
        assert (leaf.flat in RESUME_CHANGEABLE) == (leaf.role in (SCHEDULE, WHERE)), leaf.flat
    assert tried >= 55  # of the ~70 options: those with a simple other value


def test_a_new_option_follows_its_role_into_the_identity_and_the_resume_rule():
    """A fake run section with one option of each role, as a new option would be added: one line each."""
    from dataclasses import dataclass

    from vqwae.options import SCHEDULE, WHERE, identity, names_with_role, option, section

    @dataclass(frozen=True)
    class FakeRun:
        width: int = option(8, "changes what is trained")
        rounds: int = option(2, "how long", role=SCHEDULE)
        cache: str = option("here", "where", role=WHERE)

    @dataclass(frozen=True)
    class FakeTrain:
        run: FakeRun = section(FakeRun)

    base = FakeTrain()
    assert names_with_role(FakeTrain, SCHEDULE, WHERE) == {"rounds", "cache"}
    assert identity(FakeTrain(FakeRun(cache="there"))) == identity(base)
    assert identity(FakeTrain(FakeRun(width=9))) != identity(base)
    assert identity(FakeTrain(FakeRun(rounds=3))) != identity(base)
    assert identity(FakeTrain(FakeRun(width=9)), unread=(("run", "width"),)) == identity(base, unread=(("run", "width"),))
    with pytest.raises(ValueError, match="role"):
        option(1, "x", role="sometimes")


def test_vqgan_sizes_are_read_only_by_a_vqgan_network():
    import dataclasses

    from vqwae.models.networks import VQGANSizes

    sizes = {("network", f.name) for f in dataclasses.fields(VQGANSizes)}
    assert sizes <= set(TrainConfig.resolve().unread())
    assert not sizes & set(TrainConfig.resolve(arch="vqgan").unread())


def test_the_papers_presets_keep_one_pi_per_position_and_only_vqwae_carries_the_option():
    """The training default is the drop-in quantizer's shared pi (test_training); the paper's presets keep one pi
    per position, and a method without a pi does not carry the option in its run key."""
    from vqwae.reproduce.runner import run_key

    for preset in ("paper", "paper-fast", "ffhq"):
        assert TrainConfig.resolve(preset=preset).quantizer_config(64)[1].num_positions == 64, preset
    _, per_position = TrainConfig.resolve(shared_pi=False).quantizer_config(64)
    assert per_position.num_positions == 64
    vq = TrainConfig.resolve(model="vqvae")
    assert run_key(vq) == run_key(vq.replace(shared_pi=False))


#: Run keys (the reproduction's cache) computed by vqwae at c3f1090, before issue #56 removed options and split VQ-WAE
#: in two: a cache made then is found now (the retired options stay in a run's identity at their one value).
KEYS_BEFORE_56 = {
    "default": ({'preset': None}, "54182450c0"),
    "paper": ({'preset': 'paper'}, "1af4a48952"),
    "paper-fast": ({'preset': 'paper-fast'}, "3180cbff28"),
    "field-vq": ({'preset': 'field-vq'}, "69d666b27b"),
    "ffhq": ({'preset': 'ffhq'}, "7dda643439"),
    "fitted": ({'preset': 'paper-fast', 'quantize': 'transport', 'fit_steps': 1000, 'learn_pi': False, 'pi_init': 'peaked'}, "4b47342b91"),
    "recipe": ({'preset': None, 'quantize': 'transport', 'codebook_decay': 0.95, 'pull': 0.1, 'learn_pi': False, 'pi_init': 'gaussian'}, "094749a7d2"),
    "sqvae": ({'preset': None, 'model': 'sqvae'}, "3db0736347"),
    "split_unused": ({'preset': None, 'split_unused': 0.1, 'pull': 0.3, 'num_codes': 1024}, "a31efd5c2b"),
}


#: The configurations issue #64's fixes changed (``FIXES``): their keys move, by the fixes' names only. Issue #82's
#: "authors-init" (the paper's networks' biases) touches every configuration on them, which all of these train.
FIXED_BY_64 = {"paper": ["straight-through"], "paper-fast": ["straight-through"], "fitted": ["straight-through"]}


@pytest.mark.parametrize("name", list(KEYS_BEFORE_56))
def test_run_keys_made_before_the_options_were_retired_are_unchanged(name):
    """A run's key is unchanged unless a fix changed what it trains; then it moves (a run trained before the fix is not
    reused) and only by the names of the fixes: without them the identity is the one of c3f1090."""
    import hashlib
    import json

    from vqwae.reproduce.runner import run_key

    settings, key = KEYS_BEFORE_56[name]
    settings = dict(settings)
    preset = settings.pop("preset")
    cfg = TrainConfig.resolve(preset=preset, dataset="digits", **settings)
    expected = [*FIXED_BY_64.get(name, []), *(["authors-init"] if cfg.network.arch != "vqgan" else []),
                *(["dead-own-record"] if cfg.model == "vqwae" and cfg.quantizer.vqwae.product else [])]
    if not expected:
        assert "fixes" not in cfg.identity()
        assert run_key(cfg) == key
        return
    ident = cfg.identity()
    assert ident.pop("fixes") == expected
    assert run_key(cfg) != key
    assert hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:10] == key


def test_the_fixes_touch_the_configurations_they_name():
    """The straight-through fix touches gradient-trained codebooks only (VQ-VAE without EMA or the rotation trick, the
    paper's VQ-WAE), the EMA start the EMA codebooks, the dead-code record the shipped VQ-WAE; SQ-VAE is untouched."""
    cases = {(): (), (("model", "vqvae"),): ("straight-through",),
             (("model", "vqvae"), ("rotation_trick", True)): (),
             (("model", "vqvae"), ("ema", True)): ("ema-count-start",),
             (("model", "vqvae"), ("ema", True), ("vq_init", "kmeans")): (),  # its counts come from the data
             (("codebook_update", "gradient"), ("codebook_init", "normal")): ("straight-through",),
             (("model", "sqvae"),): ()}
    for settings, fixes in cases.items():  # every one on the paper's network: the authors' biases (issue #82)
        assert TrainConfig.resolve(**dict(settings)).fixes() == (*fixes, "authors-init") + (
            ("dead-own-record",) if not settings else ()), settings  # the shipped VQ-WAE's dead codes (issue #81)
    assert "authors-init" not in TrainConfig.resolve(preset="ffhq").fixes()  # VQGAN's network: taming's start


# ---- what a config file or the command line gives must apply (issue #65) --------------------------------------
@pytest.mark.parametrize("options,words", [
    (dict(model="vqwae", rotation_trick=True), "--rotation-trick is an option of --model vqvae"),
    (dict(model="sqvae", rotation_trick=True), "--rotation-trick is an option of --model vqvae"),
    (dict(model="vqvae", fit_steps=10), "--fit-steps is an option of --model vqwae"),
    (dict(model="vqvae", shared_pi=False), "is an option of --model vqwae"),
    (dict(preset="field-vq", model="vqwae"), "--preset field-vq trains --model vqvae"),
])
def test_an_option_the_trained_model_never_reads_is_refused(options, words):
    with pytest.raises(ValueError, match=words):
        TrainConfig.resolve(**options)


def test_options_of_the_trained_model_and_a_presets_own_model_are_accepted():
    assert TrainConfig.resolve(model="vqvae", rotation_trick=True).quantizer.vqvae.rotation_trick
    assert TrainConfig.resolve(preset="field-vq", model="vqvae").run.preset == "field-vq"
    assert TrainConfig.resolve(preset="paper").quantizer.shared_pi is False  # a preset's own values apply


@pytest.mark.parametrize("text,words", [
    ("preset: [paper]\n", "preset must be one name"),
    ("preset: paper\nrun: {preset: default}\n", "gives the preset twice"),
    ("model: vqwae\nrotation_trick: true\n", "--rotation-trick is an option of --model vqvae"),
])
def test_a_config_file_is_refused_in_one_line(tmp_path, text, words):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ValueError, match=words) as e:
        TrainConfig.resolve(config_file=f)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("version,words", [("3", "must be an integer from 1 to"), (99, "a newer vqwae wrote it")])
def test_a_saved_config_of_an_unknown_format_version_is_named(version, words):
    saved = dict(TrainConfig().to_dict(), format_version=version)
    with pytest.raises(ValueError, match=words):
        TrainConfig.from_saved(saved)
