"""The API reference holds what users call: every public class and function of each package has a docstring of its
own, so do the public methods and properties its classes define or inherit from vqwae (the reference shows
inherited members and does not inherit docstrings), and each quantizer's parameter table names exactly its
configuration's fields (the table's types and defaults come from the same fields: docs/_ext/griffe_options.py)."""
import dataclasses
import importlib
import inspect
import re

import pytest

PACKAGES = ["vqwae.quantizers", "vqwae.compat", "vqwae.ot", "vqwae.models", "vqwae.training", "vqwae.data", "vqwae.metrics",
            "vqwae.prior"]


def _public(package: str):
    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield f"{package}.{name}", obj


def _own_doc(obj) -> str:
    return (obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__) or ""


def _undocumented_members(cls) -> list[str]:
    out = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
        if owner is None or not owner.__module__.startswith("vqwae"):
            continue  # torch's and the standard library's are documented there
        member = owner.__dict__[name]
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property) or inspect.isfunction(member):
            if not (member.__doc__ or "").strip():
                out.append(f"{owner.__name__}.{name}")
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_class_and_function_has_its_own_docstring(package):
    missing = [name for name, obj in _public(package) if not _own_doc(obj).strip()
               or (dataclasses.is_dataclass(obj) and _own_doc(obj).startswith(obj.__name__ + "("))]
    assert not missing, f"no docstring: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_method_and_property_has_a_docstring(package):
    missing = sorted({m for _, obj in _public(package) if inspect.isclass(obj) for m in _undocumented_members(obj)})
    assert not missing, f"no docstring: {missing}"


def _args_section(doc: str) -> list[str]:
    """The names an (indentation-cleaned) docstring's ``Args:`` section documents."""
    section = doc.split("\nArgs:\n", 1)[1]
    names = []
    for line in section.splitlines():
        if line.strip() and not line.startswith("    "):  # the section ends where its indentation does
            break
        m = re.match(r"^ {4}(\w+):", line)
        if m:
            names.append(m.group(1))
    return names


@pytest.mark.parametrize("name", ["WassersteinQuantizer", "PaperWassersteinQuantizer", "VectorQuantizer",
                                  "StochasticQuantizer"])
def test_a_quantizers_parameter_table_names_its_configuration_fields(name):
    cls = getattr(importlib.import_module("vqwae.quantizers"), name)
    documented = _args_section(inspect.cleandoc(_own_doc(cls)))
    fields = [f.name for f in dataclasses.fields(cls.config_class)]
    assert sorted(documented) == sorted(fields), (sorted(set(fields) - set(documented)),
                                                  sorted(set(documented) - set(fields)))


@pytest.mark.parametrize("package", PACKAGES + ["vqwae.figures", "vqwae.studies", "vqwae.reproduce"])
def test_every_exported_value_has_a_docstring_in_the_reference(package):
    """What the reference reads statically (griffe): an exported registry or constant (``QUANTIZERS``, ``SOLVERS``,
    ``LOADERS``, ``PRESETS``, ...) has the docstring written after its assignment, not a bare value."""
    griffe = pytest.importorskip("griffe")
    loaded = griffe.load(package, search_paths=["src"], resolve_aliases=True)
    module = importlib.import_module(package)
    bare = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            continue
        member = loaded[name]
        target = member.final_target if member.is_alias else member
        if not (target.docstring and target.docstring.value.strip()):
            bare.append(name)
    assert not bare, f"exported without a docstring: {bare}"
