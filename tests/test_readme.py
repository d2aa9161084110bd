"""The README's examples run as written: every Python block, and the tokenizer section's commands."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(section: str) -> list[str]:
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def _bash_blocks(section: str) -> list[str]:
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", text[start:end], flags=re.S)


def test_use_vqwae_as_a_tokenizer_commands_and_example_run(tmp_path, monkeypatch):
    """Every command of the section, as written (comments dropped; the torchrun line needs several processes),
    then its Python example, in one fresh folder."""
    import shlex

    from typer.testing import CliRunner

    from vqwae.cli.main import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VQWAE_THREADS", "1")
    (bash,) = _bash_blocks("Use vqwae as a tokenizer")
    ran = 0
    for line in bash.splitlines():
        args = shlex.split(line, comments=True)
        if not args or args[0] == "torchrun":
            continue
        assert args[0] == "vqwae", line
        res = CliRunner().invoke(app, args[1:])
        assert res.exit_code == 0, (line, res.output, res.exception)
        ran += 1
    assert ran == 6
    (example,) = _blocks("Use vqwae as a tokenizer")
    exec(compile(example, "README.md tokenizer example", "exec"), {})


def _all_python_blocks() -> list[tuple[str, str]]:
    """(section, block) for every ```python block of the README, by its ## section."""
    out, section = [], ""
    for part in re.split(r"(?m)^(## .*)$", README.read_text()):
        if part.startswith("## "):
            section = part[3:].strip()
        else:
            out += [(section, b) for b in re.findall(r"```python\n(.*?)```", part, flags=re.S)]
    return out


@pytest.mark.parametrize("section,block", [b for b in _all_python_blocks() if b[0] != "Use vqwae as a tokenizer"],
                         ids=lambda v: v[:30] if isinstance(v, str) else None)
def test_every_python_block_of_the_readme_runs(section, block, tmp_path, monkeypatch):
    """The tokenizer section's block needs its commands first: the test above runs the two together."""
    monkeypatch.chdir(tmp_path)
    exec(compile(block, f"README.md, {section}", "exec"), {})


def test_every_python_block_is_run_by_a_test():
    sections = {s for s, _ in _all_python_blocks()}
    assert {"Use it in your own model", "The paper's networks and saved models", "Use vqwae as a tokenizer"} <= sections
