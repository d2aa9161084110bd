"""Command-line options derived from a configuration class: one ``--flat-name`` per option, its help, the
valid values and the default taken from the option's one declaration (``vqwae.options.option``).

Typer reads a command's parameters from its signature, so :func:`with_config_options` gives the command
function a signature that has its own parameters plus one per option; the function receives the options
it was given as ``**options`` (None for those not given, so that a preset or a config file can set them).
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Callable

import typer
from rich.markup import escape

from vqwae.options import Leaf, base_types, describe, flag, leaves


def _flag(leaf: Leaf) -> tuple[str, ...]:
    return (flag(leaf),)


def _help(leaf: Leaf) -> str:
    default = leaf.default
    shown = "None" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
    return escape(f"{describe(leaf)}  [default: {shown}]")  # rich would read [..] as markup


HELP_ALL = "--help-all"


def help_all_requested() -> bool:
    """Whether this invocation asked for every option (typer builds the help from the parameters it is given, so
    the choice of which to show is made when the command is built)."""
    return HELP_ALL in sys.argv


def _show_all_and_exit(ctx: typer.Context, value: bool) -> None:
    if value:
        typer.echo(ctx.get_help())
        raise typer.Exit()


def help_all_parameter() -> inspect.Parameter:
    """``--help-all``: the help with every option (``--help`` shows the common ones)."""
    opt = typer.Option(False, HELP_ALL, is_eager=True, callback=_show_all_and_exit,
                       help="Show every option, grouped by section (--help shows the common ones).")
    return inspect.Parameter("help_all", inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=bool)


def _param(leaf: Leaf, hidden: bool) -> inspect.Parameter:
    allowed, _ = base_types(leaf.hint)
    annotation = (allowed[0] if len(allowed) == 1 else str) | None
    opt = typer.Option(None, *_flag(leaf), help=_help(leaf), show_default=False, hidden=hidden,
                       rich_help_panel=leaf.path[-2] if len(leaf.path) > 1 else "run")
    return inspect.Parameter(leaf.flat, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=annotation)


def with_config_options(config_class: type, skip: tuple[str, ...] = (), common: tuple[str, ...] | None = None
                        ) -> Callable:
    """Decorator: the command also takes every option of ``config_class`` (except ``skip``) as ``**options``.
    With ``common``, ``--help`` lists only those options and ``--help-all`` every one (all are accepted always)."""

    def wrap(func: Callable) -> Callable:
        own = [p for p in inspect.signature(func).parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
        show_all = common is None or help_all_requested()
        extra = [_param(leaf, hidden=not show_all and leaf.flat not in common)
                 for leaf in leaves(config_class) if leaf.flat not in skip]
        if common is None:
            func.__signature__ = inspect.Signature(own + extra)
            return func

        @functools.wraps(func)
        def command(*args, help_all: bool = False, **kwargs):  # --help-all acts while parsing; its value is no option
            return func(*args, **kwargs)

        command.__signature__ = inspect.Signature(own + extra + [help_all_parameter()])
        return command

    return wrap
