"""``python -m vqwae ...`` (and ``torchrun -m vqwae train ...``)."""
from vqwae.cli.main import app

app(prog_name="vqwae")
