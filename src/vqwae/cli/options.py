"""Command-line options derived from a configuration class: one ``--flat-name`` per option, its help, the
valid values and the default taken from the option's one declaration (``vqwae.options.option``).

Typer reads a command's parameters from its signature, so :func:`with_config_options` gives the command
function a signature that has its own parameters plus one per option; the function receives the options
it was given as ``**options`` (None for those not given, so that a preset or a config file can set them).
"""
from __future__ import annotations

import inspect
from typing import Callable

import typer
from rich.markup import escape

from vqwae.options import Leaf, base_types, describe, leaves


def _flag(leaf: Leaf) -> tuple[str, ...]:
    name = leaf.flat.replace("_", "-")
    allowed, _ = base_types(leaf.hint)
    if allowed == [bool]:
        negative = leaf.field.metadata.get("negative") or f"no-{name}"
        return (f"--{name}/--{negative}",)
    return (f"--{name}",)


def _help(leaf: Leaf) -> str:
    default = leaf.default
    shown = "None" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
    return escape(f"{describe(leaf)}  [default: {shown}]")  # rich would read [..] as markup


def _param(leaf: Leaf) -> inspect.Parameter:
    allowed, _ = base_types(leaf.hint)
    annotation = (allowed[0] if len(allowed) == 1 else str) | None
    opt = typer.Option(None, *_flag(leaf), help=_help(leaf), show_default=False,
                       rich_help_panel=leaf.path[-2] if len(leaf.path) > 1 else "run")
    return inspect.Parameter(leaf.flat, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=annotation)


def with_config_options(config_class: type, skip: tuple[str, ...] = ()) -> Callable:
    """Decorator: the command also takes every option of ``config_class`` (except ``skip``) as ``**options``."""

    def wrap(func: Callable) -> Callable:
        own = [p for p in inspect.signature(func).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
        extra = [_param(leaf) for leaf in leaves(config_class) if leaf.flat not in skip]
        func.__signature__ = inspect.Signature(own + extra)
        return func

    return wrap
