"""The docs site: it builds strictly (a broken link, a missing page or an unresolved API reference fails), every
```python block of its pages runs as written (as tests/test_readme.py runs the README's), and the anchors the
source cites exist.

Markers a page may put on the line before a block (HTML comments, invisible in the site):

* ``<!-- docs-test: skip REASON -->`` before a ```python block: not run (e.g. it needs data from ../shared);
* ``<!-- docs-test: run the vqwae commands of the next block -->`` before a ```bash block: its ``vqwae`` lines run
  (through the CLI, in the page's folder) before the page's Python blocks, which may read what they wrote.
"""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*(.*?)\s*-->\s*$")
RUN = "<!-- docs-test: run the vqwae commands of the next block -->"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "results" not in p.relative_to(DOCS).parts)


def _blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, code, the marker on the line before it or "") for every fenced block of a page, in order."""
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append((m.group(1), m.group(2), before if before.startswith("<!--") else ""))
    return out


def _python_pages() -> list[Path]:
    return [p for p in _pages() if any(lang == "python" for lang, _, _ in _blocks(p))]


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed: pip install -e '.[docs]'")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
                          "--config-file", str(ROOT / "mkdocs.yml")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    for page in ("index.html", "guides/quantizers/index.html", "api/quantizers/index.html", "lab/index.html",
                 "benchmarks/index.html", "results/REPORT/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    api = (tmp_path / "site" / "api" / "quantizers" / "index.html").read_text()
    assert 'id="vqwae.quantizers.WassersteinQuantizer"' in api  # the reference is generated, not empty
    # what users call, on the classes they call it on (inherited members included), with parameter tables
    for member in ("set_pi", "fit_transport", "set_runtime", "set_codebook", "codebook"):
        assert f'id="vqwae.quantizers.WassersteinQuantizer.{member}"' in api, member
    assert 'id="vqwae.quantizers.diagnostics.diagnostics"' in api
    assert "ws_weight</span>" in api.split('id="vqwae.quantizers.WassersteinQuantizer"')[1].split("Bases:")[0]
    models = (tmp_path / "site" / "api" / "models" / "index.html").read_text()
    for member in ("save_pretrained", "from_pretrained", "encode", "decode_indices"):
        assert f'id="vqwae.models.VQAutoencoder.{member}"' in models, member
    # every training option on the options page, as a field with its default and flag, not as source
    from vqwae.options import flag, leaves
    from vqwae.training import TrainConfig

    options = (tmp_path / "site" / "api" / "options" / "index.html").read_text()
    assert "option(" not in options
    for leaf in leaves(TrainConfig):
        assert flag(leaf).split("/")[0] in options, leaf.flat


@pytest.mark.parametrize("page", _python_pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_of_a_page_runs(page, tmp_path, monkeypatch):
    """A page's blocks run in order in one fresh folder, each in its own namespace, after the commands its marker
    names; a block marked to skip is left out (its marker says why)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VQWAE_THREADS", "1")
    for i, (lang, code, marker) in enumerate(_blocks(page)):
        if lang == "bash" and marker == RUN:
            _run_vqwae_lines(code)
        elif lang == "python" and not SKIP.match(marker):
            exec(compile(code, f"{page.relative_to(ROOT)}, block {i}", "exec"), {})


def _run_vqwae_lines(bash: str) -> None:
    from typer.testing import CliRunner

    from vqwae.cli.main import app

    ran = 0
    for line in bash.splitlines():
        args = shlex.split(line, comments=True)
        if not args or args[0] == "torchrun":  # several processes: not here
            continue
        assert args[0] == "vqwae", line
        res = CliRunner().invoke(app, args[1:])
        assert res.exit_code == 0, (line, res.output, res.exception)
        ran += 1
    assert ran, "a run marker on a block without vqwae commands"


def test_the_docs_python_blocks_are_all_collected():
    """The guides' examples are executed: a page that loses its blocks, or a marker with a typo, shows here."""
    blocks = {p.relative_to(DOCS).as_posix(): sum(lang == "python" for lang, _, _ in _blocks(p)) for p in _pages()}
    assert blocks["guides/quantizers.md"] >= 5 and blocks["guides/tokenizer.md"] >= 1 and blocks["index.md"] >= 1
    assert sum(blocks.values()) >= 8
    for page in _pages():
        for lang, _, marker in _blocks(page):
            assert not marker or marker == RUN or SKIP.match(marker), (page, marker)
            assert lang != "py", (page, "write ```python, which the tests run")


def test_cited_lab_anchors_exist():
    """Source, scripts and the standing tables cite the lab notebook as docs/lab/PAGE.md#anchor, never by a section
    number: each such anchor is a heading's {#anchor} on that page."""
    cited = re.compile(r"docs/lab/([\w.-]+\.md)#([\w-]+)")
    files = [ROOT / "BENCHMARKS.md", ROOT / "README.md", *(ROOT / "src").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
             *(ROOT / "benchmarks").glob("*.sh")]
    seen = 0
    for f in files:
        if not f.is_file():
            continue
        for page, anchor in cited.findall(f.read_text(errors="replace")):
            target = DOCS / "lab" / page
            assert target.is_file(), (f, page)
            assert "{#" + anchor + "}" in target.read_text(), (f, page, anchor)
            seen += 1
    assert seen >= 10


def test_benchmarks_md_holds_the_standing_tables_only():
    lines = (ROOT / "BENCHMARKS.md").read_text().splitlines()
    assert len(lines) <= 300
    for table in ("Step time on the CPU", "Step time on the GPU", "Scaling in K", "The host zoo at 3,000 steps",
                  "Residual stacks", "VQGAN"):
        assert any(line.startswith("## " + table) for line in lines), table
