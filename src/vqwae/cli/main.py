"""The ``vqwae`` command line: each command lives in its own module and only parses and calls the library."""
import typer

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


app.command("train")(train_command)
app.command("eval")(eval_command)
app.command("demo")(demo_command)
app.command("reproduce")(reproduce_command)
app.command("sample")(sample_command)
app.command("probe")(probe_command)
app.command("tsne")(tsne_command)
app.add_typer(prior_app, name="prior")
