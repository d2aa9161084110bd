"""The README's "Use it in your own model" examples run as written."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(section: str) -> list[str]:
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


@pytest.mark.parametrize("index", range(2))
def test_use_it_in_your_own_model_examples_run(index):
    blocks = _blocks("Use it in your own model")
    assert len(blocks) == 2
    exec(compile(blocks[index], f"README.md example {index + 1}", "exec"), {})


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
