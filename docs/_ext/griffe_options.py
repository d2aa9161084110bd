"""A griffe extension for the API reference: configuration fields render as fields, not as source.

Every configuration in vqwae is a frozen dataclass whose fields are declared with ``vqwae.options.option(default,
help, ...)``. Read statically, such a field's value is the call's source (``option(0.003, "vqwae: lambda, ...")``)
and it has no docstring. This extension imports each configuration class, and gives each field declared with
``option`` its default as its value and its help text (the one the command line shows) as its docstring, so the
reference shows the same words as ``vqwae train --help`` from the same declaration. A nested group
(``vqwae.options.section``) shows as its class.

Why an extension and not docstrings written beside the fields: the help text is the options' one home (the CLI,
config files and the checks derive from it); a second copy in docstrings would drift.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import typing

import griffe


@functools.lru_cache(maxsize=None)
def _flags() -> dict[int, str]:
    """{id(field): the command line's flag} for every option of a training config (the same Field objects as the
    quantizers' configs hold: a dataclass's fields are its bases')."""
    from vqwae.options import flag, leaves
    from vqwae.training.config import TrainConfig

    out = {}
    for leaf in leaves(TrainConfig):
        out[id(leaf.field)] = flag(leaf)
    return out


def _live(cls: griffe.Class):
    """The class object griffe describes, or None where it cannot be imported (the docs build then shows source)."""
    try:
        return getattr(importlib.import_module(cls.module.path), cls.name)
    except Exception:  # noqa: BLE001 - a docs build must not fail on an optional dependency
        return None


def _type_name(hint) -> str:
    """An annotation as it is written: ``float | None``, ``int``."""
    return " | ".join("None" if a is type(None) else a.__name__ for a in typing.get_args(hint)) \
        if typing.get_args(hint) else getattr(hint, "__name__", str(hint))


def _keyword_options(cls: griffe.Class, config_class) -> None:
    """A quantizer's ``__init__(self, config=None, **options)`` shown with its options as keyword arguments, each
    with its type and default (the table of parameters then has both)."""
    init = cls.members.get("__init__")
    if not isinstance(init, griffe.Function):
        return
    hints = typing.get_type_hints(config_class)
    params = [p for p in init.parameters if p.kind is not griffe.ParameterKind.var_keyword]
    params += [griffe.Parameter(f.name, annotation=_type_name(hints[f.name]), kind=griffe.ParameterKind.keyword_only,
                                default=repr(f.default)) for f in dataclasses.fields(config_class)]
    init.parameters = griffe.Parameters(*params)


class OptionFields(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs) -> None:
        live = _live(cls)
        config_class = getattr(live, "config_class", None) if live is not None else None
        if config_class is not None and "config_class" in cls.members and dataclasses.is_dataclass(config_class):
            _keyword_options(cls, config_class)
        if live is None or not dataclasses.is_dataclass(live):
            return
        for f in dataclasses.fields(live):
            attr = cls.members.get(f.name)
            if not isinstance(attr, griffe.Attribute) or attr.parent is not cls:
                continue  # inherited: its own class shows it
            if f.metadata.get("section"):
                attr.value = f"{f.default_factory.__name__}()"
                attr.docstring = griffe.Docstring(f"The `{f.default_factory.__name__}` group of options.",
                                                  parent=attr)
            elif "help" in f.metadata:
                attr.value = repr(f.default)
                meta = f.metadata
                extra = []
                if meta.get("choices"):
                    extra.append("one of " + ", ".join(f"`{c}`" for c in meta["choices"]))
                if meta.get("min") is not None:
                    extra.append(f">= {meta['min']}")
                if meta.get("max") is not None:
                    extra.append(f"<= {meta['max']}")
                if meta.get("below") is not None:
                    extra.append(f"< {meta['below']}")
                text = meta["help"].removeprefix("vqwae: ") + (f" ({'; '.join(extra)})" if extra else "")
                if id(f) in _flags():
                    text += f"\n\nOn the command line: `{_flags()[id(f)]}`."
                attr.docstring = griffe.Docstring(text, parent=attr)
