"""The ``vqwae`` command (``vqwae.cli.main``); its entry point says in one line which extra a missing package
needs (``pip install vqwae`` is the quantizers alone; the command comes with ``vqwae[cli]``)."""
from __future__ import annotations


def main() -> None:
    """The console script: the command line app, or one line naming ``pip install 'vqwae[cli]'``."""
    import sys

    from vqwae.extras import missing_extra

    try:
        from vqwae.cli.main import app
    except ModuleNotFoundError as e:
        hint = missing_extra(e)
        if hint is None:
            raise
        sys.exit(f"error: {hint} (the vqwae command: pip install 'vqwae[cli]')")
    app(prog_name="vqwae")
