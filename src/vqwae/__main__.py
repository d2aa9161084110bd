"""``python -m vqwae ...`` (and ``torchrun -m vqwae train ...``)."""
from vqwae.cli import main

main()
