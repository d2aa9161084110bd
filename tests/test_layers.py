"""Packages import only downward: the README's package table is the order (lower layers first)."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "vqwae"

# Lower layers first; modules on one line are one layer (they may import each other).
LAYERS = [
    ("files", "threads", "progress", "options", "lazy", "provenance", "extras"),
    ("distributed",),
    ("fused",),
    ("ot",),
    ("quantizers",),
    ("compat",),
    ("models",),
    ("data",),
    ("metrics",),
    ("figures",),
    ("prior",),
    ("studies",),
    ("training",),
    ("runs",),
    ("reproduce",),
    ("cli", "__main__"),
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}

# Known upward imports, each to be removed (none left).
KNOWN: set[tuple[str, str]] = set()


def _imports(path: Path) -> set[str]:
    """The vqwae packages a module imports (top-level and inside functions alike)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "vqwae" and len(parts) > 1:
                out.add(parts[1])
    return out


def test_every_module_belongs_to_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())) and p.stem != "__init__"}
    assert tops <= set(LEVEL), sorted(tops - set(LEVEL))


def test_imports_only_point_down():
    upward = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).parts
        own = rel[0] if len(rel) > 1 else path.stem
        if own == "__init__":
            continue
        for target in _imports(path):
            if target in LEVEL and LEVEL[target] > LEVEL[own]:
                upward.add((own, target, "/".join(rel)))
    new = sorted(u for u in upward if (u[0], u[1]) not in KNOWN)
    assert not new, f"upward imports (a lower layer importing a higher one): {new}"
    assert {(a, b) for a, b, _ in upward} == KNOWN, "a known upward import is gone: remove it from KNOWN"
