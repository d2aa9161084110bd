"""Issue #36's cases, tried as a new user would, through the real command line (``python -m vqwae``, a fresh
process each), with every run folder checksummed before and after. Prints the tally the issue asked for and
writes benchmarks/results/robustness_audit.json.

    .venv/bin/python benchmarks/robustness_audit.py            # ~3 minutes on 2 CPU cores

Each case expects either a clear error (exit 2, one line "error: ..." or a usage error, no traceback) or success
with a check of its result; "files changed" counts files of an existing run that changed where they should not.
A read-only or full disk cannot be made here without privileges (the tests inject those errors instead:
tests/test_robustness.py::test_a_read_only_or_full_disk_is_one_line_and_keeps_the_run); the API cases (padding-
only batches, eval mode on load) are run in this process.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "VQWAE_THREADS": "1", "COLUMNS": "200"}


def vqwae(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vqwae", *map(str, args)], capture_output=True, text=True, env=ENV,
                          cwd=cwd)


def checksums(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def outcome(res: subprocess.CompletedProcess, expect: str, check=None) -> str:
    text = res.stdout + res.stderr
    if "Traceback" in text:
        return "traceback"
    if expect == "error":
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        one_line = len(lines) == 1 and lines[0].startswith("error: ")
        usage = "Usage:" in res.stderr and res.returncode == 2
        return "clean" if res.returncode == 2 and (one_line or usage) else "silent / wrong"
    if res.returncode != 0:
        return "silent / wrong"
    return "clean" if check is None or check() else "silent / wrong"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="vqwae-audit-"))
    run = work / "run"
    tiny = ["--dataset", "digits", "--train-limit", "64", "--eval-limit", "32", "--num-codes", "16", "--device", "cpu"]
    assert vqwae("train", *tiny, "--epochs", "2", "--out", run).returncode == 0
    assert vqwae("prior", "train", run, "--hidden", "8", "--layers", "2", "--epochs", "1").returncode == 0
    rows = []

    def case(group: str, name: str, args: list, expect: str, *, check=None, watch: Path | None = run,
             setup=None, cwd=None):
        if setup:
            setup()
        before = checksums(watch) if watch is not None else None
        res = vqwae(*args, cwd=cwd)
        changed = 0 if watch is None else sum(1 for k, v in before.items() if checksums(watch).get(k) != v)
        rows.append(dict(group=group, case=name, command="vqwae " + " ".join(map(str, args)), outcome=outcome(
            res, expect, check), files_changed=changed, exit=res.returncode, said=(res.stderr.strip().splitlines()
                                                                                  or [""])[-1][:160]))
        print(f"{rows[-1]['outcome']:>15}  {changed}  {name}")

    # ---- silent and lasting ------------------------------------------------------------------------
    lost = work / "lost"
    shutil.copytree(run, lost)
    (lost / "state.pt").unlink()
    case("CLI", "resume without state.pt after 2 epochs", ["train", "--out", lost, "--resume"], "error", watch=lost)
    case("CLI", "prior train over a trained prior", ["prior", "train", run, "--hidden", "8", "--layers", "2",
                                                      "--epochs", "1"], "error")
    elsewhere = work / "elsewhere_prior"
    own_bpc = json.loads((run / "eval.json").read_text())["prior_val_bpc"]  # the run's own prior's
    case("CLI", "prior train --out elsewhere leaves eval.json alone", ["prior", "train", run, "--out", elsewhere,
                                                                       "--hidden", "8", "--layers", "2", "--epochs",
                                                                       "1"], "ok",
         check=lambda: json.loads((run / "eval.json").read_text())["prior_val_bpc"] == own_bpc)
    case("CLI", "eval --no-fid --no-lpips", ["eval", run, "--no-fid", "--no-lpips", "--limit", "16"], "ok",
         watch=None)
    case("CLI", "eval --no-fid after it: no stale lpips_skipped", ["eval", run, "--no-fid", "--limit", "16"], "ok",
         watch=None, check=lambda: not ("lpips" in (e := json.loads((run / "eval.json").read_text()))
                                        and e.get("lpips") is not None and "lpips_skipped" in e))
    cfg = work / "other.yaml"
    cfg.write_text("lr: 0.0005\n")
    case("CLI", "--resume --config", ["train", "--out", run, "--resume", "--config", cfg], "error")
    case("CLI", "--resume --preset paper", ["train", "--out", run, "--resume", "--preset", "paper"], "error")
    twice = work / "twice.yaml"
    twice.write_text("lr: 0.001\nlr: 0.002\n")
    case("CLI", "YAML with lr twice", ["train", *tiny, "--config", twice, "--out", work / "t1"], "error",
         watch=None, check=None)
    both = work / "both.yaml"
    both.write_text("lr: 0.001\noptim: {lr: 0.002}\n")
    case("CLI", "YAML with lr flat and nested", ["train", *tiny, "--config", both, "--out", work / "t2"], "error",
         watch=None)
    rel = work / "relroot"
    rel.mkdir()
    case("CLI", "a relative --data-root is stored absolute", ["train", *tiny, "--data-root", "some/where",
                                                               "--max-steps", "1", "--out", rel / "r"], "ok",
         watch=None, cwd=rel, check=lambda: Path(json.loads((rel / "r" / "config.json").read_text())["data"]
                                                 ["data_root"]).is_absolute())
    case("CLI", "--out \"\"", ["train", *tiny, "--out", ""], "error", watch=None, cwd=work)
    case("CLI", "tsne --out without a suffix", ["tsne", run, "--n", "32", "--out", work / "noext"], "ok",
         check=lambda: (work / "noext.png").is_file(), watch=None)
    case("CLI", "probe --limit 1", ["probe", run, "--limit", "1"], "error")
    samples = work / "samples"
    vqwae("sample", run, "--n", "8", "--out", samples)
    case("CLI", "sample --n 2 after --n 8: no stale images", ["sample", run, "--n", "2", "--out", samples], "ok",
         watch=None, check=lambda: len(list(samples.glob("sample_*.png"))) == 2)
    case("CLI", "reproduce --datasets bogus", ["reproduce", "--datasets", "bogus", "--budget", "smoke", "--out",
                                               work / "rep"], "error", watch=None)
    case("CLI", "reproduce --datasets \"\"", ["reproduce", "--datasets", "", "--budget", "smoke", "--out",
                                              work / "rep"], "error", watch=None)
    case("CLI", "reproduce --plan without the data says why", ["reproduce", "--plan", "--datasets", "cifar10",
                                                                "--data-root", work / "nodata", "--out",
                                                                work / "rep"], "ok", watch=None)
    case("CLI", "eval --generation --no-fid", ["eval", run, "--generation", "--no-fid"], "error")
    # ---- tracebacks before ---------------------------------------------------------------------------
    case("CLI", "sample --n 100000000", ["sample", run, "--n", "100000000"], "error")
    case("CLI", "sample --n 99999999999999999999", ["sample", run, "--n", "99999999999999999999"], "error")
    afile = work / "afile"
    afile.write_text("x")
    case("CLI", "sample --out an existing file", ["sample", run, "--out", afile], "error")
    few = work / "few"
    few.mkdir()
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (40, 40), (i * 40, 0, 0)).save(few / f"{i}.png")
    case("CLI", "an image folder of 3 images", ["train", "--dataset", "imagefolder", "--data-root", few,
                                                "--image-size", "32", "--out", work / "few_run"], "error", watch=None)
    # ---- the tokenizer commands (#37) ------------------------------------------------------------------
    codes = work / "codes.safetensors"
    case("CLI", "encode", ["encode", run, "--out", codes], "ok", watch=None, check=codes.is_file)
    case("CLI", "encode over an existing file", ["encode", run, "--out", codes], "error", watch=None)
    case("CLI", "decode into a file", ["decode", run, codes, "--out", afile], "error", watch=None)
    case("CLI", "decode a weights file", ["decode", run, run / "model.safetensors", "--out", work / "d"], "error",
         watch=None)

    # ---- the API -----------------------------------------------------------------------------------
    from vqwae.models import VQAutoencoder
    from vqwae.quantizers import StochasticQuantizer, VectorQuantizer, WassersteinQuantizer

    def api(name: str, fn) -> None:
        try:
            ok = fn()
            rows.append(dict(group="API", case=name, outcome="clean" if ok else "silent / wrong", files_changed=0))
        except Exception as e:  # noqa: BLE001 (a case's failure is what we count)
            rows.append(dict(group="API", case=name, outcome="traceback", files_changed=0, said=repr(e)[:160]))
        print(f"{rows[-1]['outcome']:>15}  -  {name}")

    def padding_only(make) -> bool:
        q = make()
        x = torch.randn(4, 10, 8)
        q(x)
        before = {k: v.clone() for k, v in q.state_dict().items()}
        out = q(x, torch.zeros(4, 10, dtype=torch.bool))
        same = all(torch.equal(v, before[k]) for k, v in q.state_dict().items())
        return same and torch.isfinite(out.loss) and torch.isfinite(q(x).loss)

    for label, make in [
        ("semidiscrete", lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True)),
        ("dual", lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, solver="dual")),
        ("sinkhorn", lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, solver="sinkhorn")),
        ("exact", lambda: WassersteinQuantizer(num_codes=16, dim=8, channel_last=True, solver="exact")),
        ("vector ema kmeans expiry", lambda: VectorQuantizer(num_codes=16, dim=8, channel_last=True, ema=True,
                                                             init="kmeans", dead_code_threshold=2)),
        ("stochastic", lambda: StochasticQuantizer(num_codes=16, dim=8, channel_last=True)),
    ]:
        api(f"padding-only batch, {label}", lambda make=make: padding_only(make))

    def fresh_padding_only() -> bool:
        q = WassersteinQuantizer(num_codes=16, dim=8, channel_last=True)
        out = q(torch.randn(4, 10, 8), torch.zeros(4, 10, dtype=torch.bool))
        return torch.isfinite(out.loss) and bool(torch.isfinite(q(torch.randn(4, 10, 8)).loss))

    api("padding-only first batch", fresh_padding_only)

    def loaded_is_frozen() -> bool:
        m = VQAutoencoder.from_pretrained(run)
        x = torch.rand(4, 1, 32, 32)
        with torch.no_grad():
            a = m(x)[0]
            b = m(x)[0]
        return not m.training and torch.equal(a, b)

    api("from_pretrained: eval mode, running it changes nothing", loaded_is_frozen)

    tally = {}
    for r in rows:
        t = tally.setdefault(r["group"], {"tried": 0, "clean": 0, "traceback": 0, "silent / wrong": 0,
                                          "files changed": 0})
        t["tried"] += 1
        t[r["outcome"]] += 1
        t["files changed"] += r["files_changed"]
    print("\n| group | tried | clean | traceback | silent / wrong | existing files changed |\n| --- | --- | --- | --- | --- | --- |")
    for g, t in tally.items():
        print(f"| {g} | {t['tried']} | {t['clean']} | {t['traceback']} | {t['silent / wrong']} | {t['files changed']} |")
    for r in rows:
        if r["outcome"] != "clean" or r["files_changed"]:
            print(f"FAILING: {r['case']}: {r.get('command', '')} -> {r.get('said', '')}")
    out = HERE / "results" / "robustness_audit.json"
    out.write_text(json.dumps(dict(tally=tally, rows=rows), indent=1))
    shutil.rmtree(work, ignore_errors=True)
    print(f"-> {out}")


if __name__ == "__main__":
    main()
