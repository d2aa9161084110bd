"""How an option is declared, once, and how nested option groups map to flat names, files and values.

Every configuration in vqwae is a frozen dataclass whose fields are declared with :func:`option`: one line
holds the default, the help text, and the valid choices or range. Everything else derives from that line:
the command-line flag and its help (``vqwae.cli.options``), the keys of a config file, the saved
``config.json``, and the checks a value must pass (:func:`check_fields`, run by each config's
``__post_init__``).

A configuration may nest others (:func:`section`); every leaf option still has one *flat name*, unique
across the whole tree (its field name, or ``flat=`` where two groups would clash, e.g. SQ-VAE's
``sq_temperature_decay``). Flat names are the command-line flags (``--ws-weight``) and the keys a flat
config file or an old ``config.json`` uses.

Each option also says what it does to a run (``role``): it changes what is trained (``WHAT``, the default), how
long (``SCHEDULE``), or only where and how the run goes (``WHERE``: a path, a device, a logger). A run's identity
(:func:`identity`, the reproduction's cache key) leaves out WHERE options, and a resumed run may change SCHEDULE
and WHERE options and nothing else (:func:`names_with_role`): both rules derive from the one declaration.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import MISSING, Field, field, fields
from functools import lru_cache
from typing import Any, NamedTuple


WHAT, SCHEDULE, WHERE = "what", "schedule", "where"  # an option's role: see the module docstring
ROLES = (WHAT, SCHEDULE, WHERE)
#: the largest seed: every seed vqwae takes lies in [0, 2^32 - 1], the range numpy and scikit-learn accept (torch's
#: generators take more, but a seed is also offset, e.g. per rank and per epoch, and handed to those libraries)
SEED_MAX = 2**32 - 1


def option(default: Any, help: str, *, choices: tuple | None = None, min: float | None = None,
           max: float | None = None, below: float | None = None, flat: str | None = None,
           negative: str | None = None, role: str = WHAT) -> Any:
    """A configuration field: default, help, and its valid values.

    choices: the allowed values. min / max: inclusive bounds; below: exclusive upper bound (None values are
    not range-checked). flat: the flat name when the field name would clash. negative: the flag that sets a
    boolean to False (default ``--no-NAME``). role: WHAT (changes what a run trains), SCHEDULE (how long) or
    WHERE (where and how it runs)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    meta = dict(help=help, choices=choices, min=min, max=max, below=below, flat=flat, negative=negative, role=role)
    return field(default=default, metadata=meta)


def section(cls: type) -> Any:
    """A nested group of options."""
    return field(default_factory=cls, metadata={"section": True})


class Leaf(NamedTuple):
    """One option of a (possibly nested) configuration class."""

    flat: str  # unique flat name: the CLI flag without dashes, a flat config key
    path: tuple[str, ...]  # attribute path from the root, e.g. ("vqwae", "ws_weight")
    field: Field
    hint: Any  # the resolved type annotation

    @property
    def help(self) -> str:
        return self.field.metadata.get("help", "")

    @property
    def role(self) -> str:
        return self.field.metadata.get("role", WHAT)

    @property
    def default(self) -> Any:
        return self.field.default if self.field.default is not MISSING else self.field.default_factory()


@lru_cache(maxsize=None)
def leaves(cls: type) -> tuple[Leaf, ...]:
    """Every option of ``cls``, depth first, with its flat name (unique: checked here)."""
    out: list[Leaf] = []

    def walk(c: type, prefix: tuple[str, ...]) -> None:
        hints = typing.get_type_hints(c)
        for f in fields(c):
            if f.metadata.get("section"):
                walk(hints[f.name], prefix + (f.name,))
            elif f.init:
                out.append(Leaf(f.metadata.get("flat") or f.name, prefix + (f.name,), f, hints[f.name]))

    walk(cls, ())
    seen: dict[str, Leaf] = {}
    for leaf in out:
        if leaf.flat in seen:
            raise TypeError(f"{cls.__name__}: options {'.'.join(seen[leaf.flat].path)} and "
                            f"{'.'.join(leaf.path)} share the flat name {leaf.flat!r} (give one flat=...)")
        seen[leaf.flat] = leaf
    return tuple(out)


def flat_names(cls: type) -> dict[str, Leaf]:
    return {leaf.flat: leaf for leaf in leaves(cls)}


def find_leaf(cls: type, key: str) -> Leaf | None:
    """The option a key names: its flat name or its dotted path ("ws_weight", "quantizer.vqwae.ws_weight"; dashes
    read as underscores), or None."""
    name = key.replace("-", "_")
    return flat_names(cls).get(name) or {".".join(leaf.path): leaf for leaf in leaves(cls)}.get(name)


def check_int(value, name: str, minimum: int = 0) -> int:
    """``value`` when it is an int (not a bool) >= ``minimum``; else a one-line ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def names_with_role(cls: type, *roles: str) -> frozenset[str]:
    """The flat names of the options of ``cls`` whose role is one of ``roles``."""
    return frozenset(leaf.flat for leaf in leaves(cls) if leaf.role in roles)


def identity(config, unread: tuple[tuple[str, ...], ...] = ()) -> dict:
    """What a configuration trains, as a nested dict: :func:`to_nested` without the WHERE options and without
    the ``unread`` paths (options or whole sections the configuration never reads, given by its owner)."""
    nested = to_nested(config)
    paths = [leaf.path for leaf in leaves(type(config)) if leaf.role == WHERE] + list(unread)
    for path in paths:
        node = nested
        for part in path[:-1]:
            node = node.get(part, {})
        node.pop(path[-1], None)
    return nested


def to_flat(config) -> dict:
    """{flat name: value} of a configuration instance."""
    out = {}
    for leaf in leaves(type(config)):
        value = config
        for name in leaf.path:
            value = getattr(value, name)
        out[leaf.flat] = value
    return out


def from_flat(cls: type, values: dict, *, base=None, where: str = "config"):
    """An instance of ``cls`` from {flat name or dotted path: value}, on top of ``base`` (default: the
    defaults). Values are coerced to each option's type; unknown keys are an error naming the valid ones."""
    nested: dict = to_nested(base) if base is not None else {}
    unknown, given = [], {}
    for key, value in values.items():
        leaf = find_leaf(cls, key)
        if leaf is None:
            unknown.append(key)
            continue
        if leaf.flat in given:  # e.g. a flat `lr` and a nested `optim: {lr}`: neither may silently win
            raise ValueError(f"{where}: {leaf.flat} is given twice ({given[leaf.flat]} and {key})")
        given[leaf.flat] = key
        node = nested
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        node[leaf.path[-1]] = coerce(value, leaf.hint, f"{where}: {leaf.flat}")
    if unknown:
        raise ValueError(f"unknown {where} keys {sorted(unknown)}; valid keys: {', '.join(sorted(flat_names(cls)))}")
    return build(cls, nested)


def to_nested(config) -> dict:
    """The nested {section: {name: value}} dict of an instance (what config.json stores)."""
    return dataclasses.asdict(config)


def build(cls: type, nested: dict):
    """An instance from a nested dict (missing keys take their defaults)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in fields(cls):
        if f.name not in nested:
            continue
        value = nested[f.name]
        if f.metadata.get("section"):
            if not isinstance(value, dict):
                raise ValueError(f"{f.name} must be a mapping of options, got {value!r}")
            kwargs[f.name] = build(hints[f.name], value)
        else:
            kwargs[f.name] = value
    unknown = set(nested) - {f.name for f in fields(cls)}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)} in {cls.__name__}")
    return cls(**kwargs)


def base_types(hint) -> tuple[list, bool]:
    """(the non-None types of an annotation, whether None is allowed)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = list(typing.get_args(hint))
        return [a for a in args if a is not type(None)], type(None) in args
    return [hint], False


_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def coerce(value, hint, name: str):
    """``value`` as the annotated type (int, float, bool, str, or X | None), or a ValueError naming ``name``,
    the value and the expected type. Strings are parsed (YAML reads ``5e-4`` as a string)."""
    allowed, nullable = base_types(hint)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and nullable):
        if nullable:
            return None
        raise ValueError(f"{name}: None is not allowed (expected {_type_name(hint)})")
    for t in allowed:
        try:
            if t is bool:
                if isinstance(value, bool):
                    return value
                if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
                    return value.lower() in _TRUE
            elif t is int:
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
                if isinstance(value, float) and value.is_integer():
                    return int(value)
                if isinstance(value, str):
                    return int(value.strip())
            elif t is float:
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return float(value)
                if isinstance(value, str):
                    return float(value.strip())
            elif t is str:
                if isinstance(value, str):
                    return value
        except ValueError:
            continue
    raise ValueError(f"{name}: {value!r} is not {_type_name(hint)}")


def _type_name(hint) -> str:
    allowed, nullable = base_types(hint)
    names = [{bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(t, str(t)) for t in allowed]
    return " or ".join(names + (["null"] if nullable else []))


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _check_type(value, hint, name: str) -> None:
    """A ValueError when ``value`` is not of the annotated type: the Python API is held to what a config file's
    ``coerce`` gives (a bool is a bool, not the string 'False'; an int is an int, not 2.5); a float takes an int."""
    allowed, _ = base_types(hint)
    ok = {bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
    checks = [ok[t] for t in allowed if t in ok]
    if checks and len(checks) == len(allowed) and not any(check(value) for check in checks):
        raise ValueError(f"{name}: {value!r} is not {_type_name(hint)}")


def check_fields(config) -> None:
    """Check every option of a config instance against its declared type, choices and range (one line per error).
    Each config calls this from ``__post_init__``; nested sections check themselves."""
    hints = _hints(type(config))
    for f in fields(config):
        if f.metadata.get("section") or "help" not in f.metadata:
            continue
        value, meta = getattr(config, f.name), f.metadata
        if value is None:
            continue
        _check_type(value, hints[f.name], f.name)
        if meta["choices"] is not None and value not in meta["choices"]:
            raise ValueError(f"unknown {f.name} {value!r}; valid: {', '.join(map(repr, meta['choices']))}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value}")
            lo, hi, below = meta["min"], meta["max"], meta["below"]
            if (lo is not None and value < lo) or (hi is not None and value > hi) or (below is not None and value >= below):
                raise ValueError(f"{f.name} must be {_range_text(lo, hi, below)}, got {value}")


def _range_text(lo, hi, below) -> str:
    parts = []
    if lo is not None:
        parts.append(f">= {lo}")
    if hi is not None:
        parts.append(f"<= {hi}")
    if below is not None:
        parts.append(f"< {below}")
    return " and ".join(parts)


def describe(leaf: Leaf) -> str:
    """Help text with the valid values and the default, for the CLI."""
    meta = leaf.field.metadata
    text = leaf.help
    if meta.get("choices"):
        text += f" [{' | '.join(map(str, meta['choices']))}]"
    return text


__all__ = ["option", "section", "Leaf", "leaves", "flat_names", "find_leaf", "check_int", "to_flat", "from_flat", "to_nested", "build",
           "coerce", "check_fields", "describe", "base_types"]


def flag(leaf: Leaf) -> str:
    """The command line's flag of an option: ``--ws-weight``; a boolean's pair, ``--learn-pi/--fixed-pi``."""
    name = leaf.flat.replace("_", "-")
    if base_types(leaf.hint)[0] == [bool]:
        return f"--{name}/--{leaf.field.metadata.get('negative') or 'no-' + name}"
    return f"--{name}"
