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
