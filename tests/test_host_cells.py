"""A zoo cell's identity: ``benchmarks/hosts.py`` names one result file per host, data set, K, steps, seed, batch,
stream and tag, and ``benchmarks/hosts_table.py`` keeps a run at another batch out of the host's own cell (issue #81's
field regime: the paper host at batch 256, one latent a code a step at K = 16,384)."""
from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
from hosts import result_path  # noqa: E402
from hosts_table import load, rises  # noqa: E402


def cell(**changes) -> Namespace:
    args = dict(host="paper", dataset="cifar10", num_codes=16384, steps=500, seed=0, batch=None, stream=0, tag="")
    return Namespace(**{**args, **changes})


def test_the_result_file_names_the_batch_only_when_given():
    assert result_path(cell()).name == "host_paper_cifar10_k16384_500_seed0.json"
    assert (result_path(cell(batch=256, stream=1, tag="x")).name
            == "host_paper_cifar10_k16384_500_seed0_batch256_stream1_x.json")


def test_a_run_at_another_batch_is_its_own_cell(tmp_path):
    curve = [dict(step=500, mse=0.01, perplexity=100.0)]
    for name, extra in (("a.json", {}), ("b.json", {"batch": 256})):
        meta = dict(host="paper", dataset="cifar10", num_codes=16384, steps=500, seed=0, date="2026", **extra)
        (tmp_path / name).write_text(json.dumps(dict(meta=meta, rows=[dict(quantizer="VQ-WAE", mse=0.01)],
                                                     curves={"VQ-WAE": curve})))
    cells = load([tmp_path / "a.json", tmp_path / "b.json"])
    assert set(cells) == {("paper", "cifar10", 16384, 500), ("paper (batch 256)", "cifar10", 16384, 500)}
    assert all(len(rows["VQ-WAE"]) == 1 for rows in cells.values())


def test_a_batch_below_one_is_refused_in_one_line():
    run = subprocess.run([sys.executable, str(BENCH / "hosts.py"), "--host", "paper", "--batch", "0"],
                         capture_output=True, text=True)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines() == ["error: --batch must be 1 or more, not 0"]


def test_a_label_whose_value_became_the_default_joins_the_default_row(tmp_path):
    """``--label "pull 0.02=VQ-WAE"``: the runs of the old label and those of the new default are one row."""
    for name, quantizer, seed in (("a.json", "pull 0.02", 0), ("b.json", "VQ-WAE", 1)):
        meta = dict(host="paper", dataset="cifar10", num_codes=16384, steps=500, seed=seed, date="2026")
        curve = [dict(step=500, mse=0.01 + seed, perplexity=100.0)]
        (tmp_path / name).write_text(json.dumps(dict(meta=meta, rows=[dict(quantizer=quantizer)],
                                                     curves={quantizer: curve})))
    cells = load([tmp_path / "a.json", tmp_path / "b.json"], names={"pull 0.02": "VQ-WAE"})
    (quantizers,) = cells.values()
    assert list(quantizers) == ["VQ-WAE"] and sorted(r["mse"] for r in quantizers["VQ-WAE"]) == [0.01, 1.01]


def test_rises_counts_the_evaluations_from_step_500_that_jump_above_the_factor_and_names_them(tmp_path):
    """``--rises 1.5``: a run's error at 1,000 three times its error at 750 is an excursion; a fall, a rise below the
    factor and a rise before step 500 are not."""
    errors = {"VQ-WAE": [0.05, 0.01, 0.008, 0.0051, 0.0127], "field": [0.05, 0.01, 0.014, 0.0081, 0.008]}
    meta = dict(host="default-init", dataset="cifar10", num_codes=16384, steps=1000, seed=0, date="2026")
    curves = {q: [dict(step=250 * i, mse=e, perplexity=1.0) for i, e in enumerate(v)] for q, v in errors.items()}
    (tmp_path / "a.json").write_text(json.dumps(dict(meta=meta, rows=[dict(quantizer=q) for q in curves],
                                                     curves=curves)))
    table = rises(load([tmp_path / "a.json"]), 1.5).splitlines()
    assert table[2] == ("| VQ-WAE | 3 | 1 | 1 | default-init cifar10 K=16384 seed 0 stream 0 step 1000: 0.00510 -> "
                        "0.01270 |")
    assert table[3] == "| field | 3 | 0 | 1 | - |"


def test_on_a_run_both_names_have_the_relabelled_row_replaces_the_old_defaults(tmp_path):
    """A file of the old default beside the label (``"VQ-WAE"`` at the old pull and ``"pull 0.02"``, today's default,
    on one run), a file of today's default alone and an older file of the label on that run: each run counts once,
    with today's default's row (the label's within one process, else the latest)."""
    files = (("a.json", {"VQ-WAE": 0.9, "pull 0.02": 0.5}, 0, "2026"), ("b.json", {"VQ-WAE": 0.7}, 1, "2026"),
             ("c.json", {"pull 0.02": 0.3}, 1, "2025"))
    for name, quantizers, seed, date in files:
        meta = dict(host="paper", dataset="cifar10", num_codes=16384, steps=500, seed=seed, date=date)
        curves = {q: [dict(step=500, mse=v, perplexity=100.0)] for q, v in quantizers.items()}
        (tmp_path / name).write_text(json.dumps(dict(meta=meta, rows=[dict(quantizer=q) for q in curves],
                                                     curves=curves)))
    cells = load([tmp_path / n for n in ("a.json", "b.json", "c.json")], names={"pull 0.02": "VQ-WAE"})
    (quantizers,) = cells.values()
    assert sorted((r["run"][0], r["mse"]) for r in quantizers["VQ-WAE"]) == [(0, 0.5), (1, 0.7)]
