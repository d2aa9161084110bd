"""A package's exports loaded on first use (PEP 562), so that importing a package (or one light module of it, such as
the options the command line's help reads) does not import torch.

A package declares what it exports, and where each name lives, once: as the imports of an ``if TYPE_CHECKING:``
block, which static tools (type checkers, the API reference) read as they are, and which :func:`attach` reads to
load each name when it is first asked for::

    from typing import TYPE_CHECKING

    from vqwae.lazy import attach

    if TYPE_CHECKING:  # the exports, imported on first use (vqwae.lazy), in the API reference's order
        from vqwae.quantizers.wasserstein import WassersteinQuantizer

    __all__ = ["WassersteinQuantizer"]
    __getattr__, __dir__ = attach(__name__)

``from vqwae.quantizers import WassersteinQuantizer``, ``vqwae.quantizers.WassersteinQuantizer`` and ``import *``
work as with eager imports; a submodule not imported yet is imported when asked for as an attribute, as it was when
the package imported it eagerly, and an export named as the submodule it comes from (``vqwae.quantizers.diagnostics``,
the function) stays the export when that submodule is imported.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from typing import Callable

from vqwae.extras import require


def _declared(source: str, package: str) -> dict[str, tuple[str, str]]:
    """name -> (module, attribute) of each ``from MODULE import ATTRIBUTE [as name]`` in the top-level
    ``if TYPE_CHECKING:`` blocks of a module's source."""
    out = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for imp in node.body:
            if not isinstance(imp, ast.ImportFrom) or imp.level or not imp.module:
                raise ImportError(f"{package}: the TYPE_CHECKING block holds only 'from vqwae.X import Y' "
                                  f"(line {imp.lineno})")
            for alias in imp.names:
                out[alias.asname or alias.name] = (imp.module, alias.name)
    return out


def attach(package: str) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), which loads the names its
    ``if TYPE_CHECKING:`` block imports on first use. Its ``__all__`` must list exactly those names."""
    module = sys.modules[package]
    source = module.__spec__.loader.get_source(package)
    if source is None:
        raise ImportError(f"{package}: its lazy exports are declared in its source, which is not installed")
    exports = _declared(source, package)
    declared, public = set(exports), set(getattr(module, "__all__", ()))
    if declared != public:
        raise ImportError(f"{package}: __all__ and the TYPE_CHECKING imports differ: "
                          f"{sorted(declared ^ public)}")
    shadowed = {name: attribute for name, (where, attribute) in exports.items() if where == f"{package}.{name}"}
    if shadowed:
        module.__class__ = _keeping_exports(shadowed)

    def __getattr__(name: str):
        if name in exports:
            where, attribute = exports[name]
            value = getattr(require(where), attribute)  # a missing extra: one line naming its pip install
            setattr(module, name, value)  # found directly from now on
            return value
        if not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")  # a submodule: sets the attribute itself
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | declared)

    return __getattr__, __dir__


def _keeping_exports(shadowed: dict[str, str]) -> type:
    """A package class on which importing the submodule ``P.name`` binds the export ``name`` (its attribute
    ``shadowed[name]``) rather than the submodule: the import system binds a submodule to its package when it is first
    loaded, which an eager package did before its own import of the export."""

    class Package(types.ModuleType):
        def __setattr__(self, name, value):
            if (name in shadowed and isinstance(value, types.ModuleType)
                    and value.__name__ == f"{self.__name__}.{name}"):
                value = getattr(value, shadowed[name])
            super().__setattr__(name, value)

    return Package
