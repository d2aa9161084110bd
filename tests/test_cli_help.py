"""``vqwae --help`` and every ``vqwae CMD --help`` answer without importing torch (issue #59): the command modules
import the library when a command runs, and the options the help lists (``TrainConfig``'s) are declared in modules
that need no torch (``vqwae.lazy``)."""
import json
import subprocess
import sys
import textwrap

import pytest

# In a fresh interpreter: import the command line, build the help of every command and subcommand, report what was
# imported. (A subprocess: this test session has imported torch long since.) `vqwae train --help-all` lists every
# option, chosen when the command is built (vqwae.cli.options.help_all_requested): run with it in sys.argv.
HELP_EVERY_COMMAND = textwrap.dedent("""
    import json, sys

    import typer
    from typer.testing import CliRunner

    from vqwae.cli.main import app

    def paths(command, prefix=()):
        yield prefix
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from paths(sub, prefix + (name,))

    runner = CliRunner()
    helps = {}
    for path in paths(typer.main.get_command(app)):
        for flag in ("--help",) + (("--help-all",) if path == ("train",) else ()):
            result = runner.invoke(app, [*path, flag])
            helps[" ".join(("vqwae",) + path + (flag,))] = [result.exit_code, result.output]
    heavy = sorted(m for m in ("torch", "numpy", "scipy", "PIL", "safetensors") if m in sys.modules)
    print(json.dumps({"helps": helps, "heavy": heavy,
                      "vqwae": sorted(m for m in sys.modules if m.startswith("vqwae"))}))
""")


@pytest.mark.parametrize("argv", [[], ["--help-all"]], ids=["help", "help-all"])
def test_every_help_answers_without_torch(argv):
    res = subprocess.run([sys.executable, "-c", HELP_EVERY_COMMAND, *argv], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-4000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    helps = report["helps"]
    expected = {"vqwae --help", "vqwae train --help", "vqwae train --help-all", "vqwae eval --help",
                "vqwae reproduce --help", "vqwae sample --help", "vqwae encode --help", "vqwae decode --help",
                "vqwae prior --help", "vqwae prior train --help", "vqwae probe --help", "vqwae tsne --help",
                "vqwae demo --help"}
    assert expected <= set(helps), sorted(expected - set(helps))
    for command, (code, output) in helps.items():
        assert code == 0 and "Usage:" in output, (command, output[-2000:])
    assert "--num-codes" in helps["vqwae train --help"][1]  # TrainConfig's options were derived
    assert ("--ws-weight" in helps["vqwae train --help-all"][1]) == bool(argv)  # every option, or the common ones
    assert report["heavy"] == [], f"the help imported {report['heavy']}; vqwae modules: {report['vqwae']}"


def test_a_lazy_package_exports_what_it_did():
    """Names load on first use, the same objects as from their modules; ``__all__`` and ``dir`` list them; an export
    named as its own submodule (``vqwae.quantizers.diagnostics``) stays the export."""
    import vqwae.ot
    import vqwae.quantizers
    from vqwae.quantizers import WassersteinQuantizer, diagnostics
    from vqwae.quantizers.diagnostics import Diagnostics
    from vqwae.quantizers.wasserstein import WassersteinQuantizer as home

    assert WassersteinQuantizer is home
    assert callable(diagnostics) and vqwae.quantizers.diagnostics is diagnostics
    assert set(vqwae.quantizers.__all__) <= set(dir(vqwae.quantizers))
    assert vqwae.quantizers.Diagnostics is Diagnostics
    assert vqwae.quantizers.QUANTIZERS["wasserstein"] is WassersteinQuantizer
    assert list(vqwae.ot.SOLVERS) == ["semidiscrete", "exact", "sinkhorn", "dual"]
    assert vqwae.ot.exact.ExactSolver is vqwae.ot.SOLVERS["exact"]  # a submodule, as an attribute
    try:
        vqwae.quantizers.NoSuchName
    except AttributeError as e:
        assert "vqwae.quantizers" in str(e) and "NoSuchName" in str(e)
    else:
        raise AssertionError("an unknown name was found")
