"""``pip install vqwae`` (issue #66): a core of torch, numpy and safetensors that runs the quantizers with every other
dependency unimportable; a missing extra is one line naming the ``pip install`` that brings it; a wheel builds, lists
only the core as its requirements, and its package runs the README's first example."""
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE = {"torch", "numpy", "safetensors"}
#: every package vqwae or its extras import beyond the core (their import names)
OTHERS = ["scipy", "ot", "torchvision", "matplotlib", "sklearn", "torchmetrics", "typer", "rich", "click", "tqdm",
          "yaml", "PIL", "huggingface_hub", "skimage", "torch_fidelity", "tensorboard", "threadpoolctl"]


def _run_blocked(code: str, blocked=OTHERS, path: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where the ``blocked`` packages cannot be imported (``path``: put first on
    sys.path, e.g. an installed wheel's files)."""
    prelude = textwrap.dedent(f"""
        import sys
        BLOCKED = {set(blocked)!r}
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        sys.meta_path.insert(0, Block())
        {f'sys.path.insert(0, {str(path)!r})' if path else ''}
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=path or REPO, timeout=300)


CORE_USE = """
import torch
from safetensors.torch import load_file, save_file
import vqwae.quantizers as Q

for q in (Q.WassersteinQuantizer(num_codes=32, dim=8, channel_last=True),
          Q.VectorQuantizer(num_codes=32, dim=8, channel_last=True, ema=True, init="kmeans"),
          Q.ResidualQuantizer(lambda: Q.WassersteinQuantizer(num_codes=32, dim=8, channel_last=True), 2)):
    z = torch.randn(4, 16, 8, requires_grad=True)
    out = q(z)
    (out.quantized.square().mean() + out.loss).backward()
    save_file(q.state_dict(), "q.safetensors")
    q.load_state_dict(load_file("q.safetensors"))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
print("core ok:", Q.__file__)
"""


def test_the_quantizers_run_with_every_other_dependency_unimportable(tmp_path):
    r = _run_blocked(CORE_USE.replace('"q.safetensors"', repr(str(tmp_path / "q.safetensors"))))
    assert r.returncode == 0 and "core ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.parametrize("code,extra", [
    ("import torch; from vqwae.quantizers import PaperWassersteinQuantizer as P\n"
     "P(num_codes=8, dim=4, channel_last=True, solver='exact')(torch.randn(2, 3, 4))", "paper"),
    ("from vqwae.training import TrainConfig", "train"),
    ("import torch; from vqwae.metrics import ssim_per_image\n"
     "ssim_per_image(torch.rand(1, 1, 16, 16), torch.rand(1, 1, 16, 16))", "eval"),
])
def test_a_missing_extra_is_one_line_naming_its_pip_install(code, extra):
    r = _run_blocked(code)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert f"pip install 'vqwae[{extra}]'" in last, r.stderr[-2000:]


def test_the_command_without_its_extra_says_which_to_install():
    r = _run_blocked("import runpy; runpy.run_module('vqwae', run_name='__main__')", blocked=["typer", "click"])
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "error: typer is not installed; this part of vqwae needs it: pip install 'vqwae[cli]' "
        "(the vqwae command: pip install 'vqwae[cli]')"], r.stderr[-2000:]


@pytest.mark.slow
def test_a_wheel_builds_requires_only_the_core_and_runs_the_readme_example(tmp_path):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), "-q"], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("vqwae-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
        assert any(n.endswith("LICENSE") for n in z.namelist())
    requires = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(.*)$", metadata, flags=re.M)
    core = {name.lower() for name, rest in requires if "extra ==" not in rest}
    assert core == CORE, core
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", str(wheel), "--no-deps", "--target", str(site),
                              "-q"], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    readme = (REPO / "README.md").read_text()
    first = re.search(r"```python\n(.*?)```", readme, flags=re.S).group(1)
    r = _run_blocked(first + "\nimport vqwae\nprint('from', vqwae.__file__)\n", path=site)
    assert r.returncode == 0, r.stderr[-2000:]
    assert str(site) in r.stdout  # the wheel's package ran, not the checkout's


def test_the_install_page_lists_each_extras_packages():
    """docs/install.md's table names every package each extra of pyproject.toml brings (and the core's), so the page
    cannot drift from what ``pip install`` does."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    rows = {}
    for line in (REPO / "docs" / "install.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3:
            rows[cells[0].strip("`")] = cells[1].lower()
    extras = {"(none)": project["dependencies"], **project["optional-dependencies"]}
    for extra, requirements in extras.items():
        if extra in ("test", "docs"):
            continue
        assert extra in rows, f"docs/install.md has no row for the extra {extra!r}"
        for requirement in requirements:
            name = re.split(r"[<>=\[ ;]", requirement, maxsplit=1)[0].lower()
            wanted = re.search(r"\[(.*)\]", requirement).group(1).split(",") if name == "vqwae" else [name]
            for word in wanted:
                assert word.lower() in rows[extra], f"docs/install.md: the {extra!r} row does not name {word!r}"
