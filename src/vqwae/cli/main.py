"""The ``vqwae`` command line: each command lives in its own module and only parses and calls the library.

A command module imports the library (and so torch) inside its command function, when the command runs, not at its
top: ``vqwae --help`` and every ``vqwae CMD --help`` answer without importing torch (tests/test_cli_help.py)."""
import typer

from vqwae.cli.codes import decode_command, encode_command
from vqwae.cli.common import one_line_errors
from vqwae.cli.demo import demo_command
from vqwae.cli.evaluate import eval_command
from vqwae.cli.reproduce import reproduce_command
from vqwae.cli.prior import prior_app, sample_command
from vqwae.cli.studies import probe_command, tsne_command
from vqwae.cli.train import train_command

app = typer.Typer(help="VQ-WAE: train, evaluate, sample and reproduce the paper.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False, add_completion=False)


@app.callback()
def main() -> None:
    """VQ-WAE (Vuong et al., ICML 2023): train, evaluate, sample and reproduce the paper."""


for name, command in (("train", train_command), ("eval", eval_command), ("demo", demo_command),
                      ("reproduce", reproduce_command), ("sample", sample_command), ("probe", probe_command),
                      ("tsne", tsne_command), ("encode", encode_command), ("decode", decode_command)):
    app.command(name)(one_line_errors(command))
app.add_typer(prior_app, name="prior")
