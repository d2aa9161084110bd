"""A run's provenance: the commit of the code, whether the code differs from it (docs and result files do not count),
and the device, with the CPU's vector instructions (runs on two machines of one kind can differ: lab 58)."""
import shutil
import subprocess

import pytest
import torch

from vqwae.provenance import commit_of, describe_device, digest_of, provenance, source_digest


@pytest.fixture
def checkout(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name, text in {"src/pkg/code.py": "x = 1\n", "docs/page.md": "a\n", "README.md": "r\n",
                       "benchmarks/results/cell.json": "{}\n", "benchmarks/run.py": "y = 2\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    return tmp_path


def test_docs_readmes_and_result_files_do_not_make_the_code_dirty(checkout):
    inside = checkout / "src" / "pkg"
    commit, dirty = commit_of(inside)
    assert len(commit) == 40 and dirty is False
    for name in ("docs/page.md", "README.md", "benchmarks/results/cell.json"):
        (checkout / name).write_text("edited\n")
    assert commit_of(inside) == (commit, False)
    (checkout / "benchmarks/run.py").write_text("y = 3\n")  # a benchmark script is code
    assert commit_of(inside) == (commit, True)


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert commit_of(tmp_path) == (None, None)


def test_the_cpu_device_names_its_vector_instructions():
    described = describe_device(torch.device("cpu"))
    assert described.startswith("cpu: ") and described.endswith(torch.backends.cpu.get_cpu_capability())
    record = provenance("eval", torch.device("cpu"), steps=3)
    assert record["event"] == "eval" and record["device"] == described and record["steps"] == 3


def test_the_digest_names_the_code_wherever_it_lies(tmp_path):
    """A copy of the package run outside any checkout (the notebook's candidates) still says which code made a number:
    the same files give the same digest in another folder; an edit, a rename or a new file gives another."""
    a, b = tmp_path / "a" / "pkg", tmp_path / "b" / "pkg"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / "__init__.py").write_text("x = 1\n")
        (root / "sub" / "m.py").write_text("y = 2\n")
        (root / "notes.md").write_text("not code\n")
    assert digest_of(a) == digest_of(b) and len(digest_of(a)) == 16
    (b / "notes.md").write_text("edited\n")
    assert digest_of(a) == digest_of(b)
    (b / "sub" / "m.py").write_text("y = 3\n")
    assert digest_of(a) != digest_of(b)
    (b / "sub" / "m.py").write_text("y = 2\n")
    (b / "sub" / "m.py").rename(b / "sub" / "n.py")
    assert digest_of(a) != digest_of(b)
    (b / "sub" / "n.py").rename(b / "sub" / "m.py")
    assert digest_of(a) == digest_of(b)
    (b / "extra.py").write_text("")
    assert digest_of(a) != digest_of(b)
    assert provenance("eval", torch.device("cpu"))["source_digest"] == source_digest()
