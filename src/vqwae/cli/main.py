"""The ``vqwae`` command line. Each command lives in its own module; this file only registers them."""
import typer

from vqwae.cli.train import train_command

app = typer.Typer(help="VQ-WAE: train, evaluate, sample and reproduce the paper.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False, add_completion=False)


@app.callback()
def main() -> None:
    """VQ-WAE (Vuong et al., ICML 2023): train, evaluate, sample and reproduce the paper."""


app.command("train")(train_command)


def _register_optional():
    """Commands whose modules are added as the project grows."""
    import importlib

    for module, name, attr in [
        ("vqwae.cli.evaluate", "eval", "eval_command"),
        ("vqwae.cli.demo", "demo", "demo_command"),
        ("vqwae.cli.reproduce", "reproduce", "reproduce_command"),
        ("vqwae.cli.stage_two", "sample", "sample_command"),
        ("vqwae.cli.stage_two", "probe", "probe_command"),
        ("vqwae.cli.stage_two", "tsne", "tsne_command"),
    ]:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        app.command(name)(getattr(mod, attr))
    try:
        from vqwae.cli.stage_two import prior_app
        app.add_typer(prior_app, name="prior")
    except ModuleNotFoundError as e:
        if e.name != "vqwae.cli.stage_two":
            raise


_register_optional()
