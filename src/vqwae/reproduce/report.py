"""REPORT.md and a self-contained REPORT.html (images inlined) from structured sections.

Both are rendered from the same ``Section`` objects, so the two never disagree."""
from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

from vqwae.files import atomic_write_text


@dataclass
class Claim:
    text: str  # the paper's claim, in one sentence
    holds: bool | None  # None: could not be checked in this run
    detail: str = ""  # the numbers behind the verdict
    config: str = ""  # which configuration of the method it was checked on (a column of the summary)
    within_noise: bool = False  # the deciding margin is smaller than one run's noise: the verdict is a coin toss

    @property
    def verdict(self) -> str:
        base = {True: "holds", False: "DOES NOT HOLD", None: "not checked"}[self.holds]
        return base + (" (within noise)" if self.within_noise and self.holds is not None else "")

    @property
    def clear(self) -> bool:
        """Checked, and decided by more than the noise."""
        return self.holds is not None and not self.within_noise

    @property
    def line(self) -> str:
        """The claim as a list item's text: "[config] text (detail)"."""
        return (f"[{self.config}] " if self.config else "") + self.text + (f" ({self.detail})" if self.detail else "")


@dataclass
class Section:
    title: str
    source: str  # which table/figure of the paper
    header: list[str]
    rows: list[list[str]]
    claims: list[Claim] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budget: str = ""  # the budget its runs were trained at (shown in its heading and beside each of its claims)

    @property
    def heading(self) -> str:
        return self.title + (f" (budget `{self.budget}`)" if self.budget else "")


def claims_summary(sections: list[Section], columns: dict[str, str]) -> Section:
    """The reader's summary: one row per claim (in the sections' order), one column per configuration it was
    checked on (``columns``: config -> heading); "—" where a claim was not checked on that configuration. The
    budget column says the budget each claim was judged at (a report leading with a longer budget has both)."""
    verdicts: dict[tuple[str, str], dict[str, Claim]] = {}
    for s in sections:
        for c in s.claims:
            verdicts.setdefault((f"{s.title}: {c.text}", s.budget), {})[c.config] = c
    rows = [[claim, f"`{budget}`" if budget else "—"] + [v[config].verdict if config in v else "—" for config in columns]
            for (claim, budget), v in verdicts.items()]

    def count(config, keep) -> int:
        return sum(bool(keep(v[config])) for v in verdicts.values() if config in v)

    notes = ["Holds / checked: " + "; ".join(
        f"{columns[c]} {count(c, lambda x: x.holds and x.clear)} / {count(c, lambda x: x.holds is not None)}"
        f" ({count(c, lambda x: x.holds is not None and not x.clear)} within noise)" for c in columns)
        + ". \"Within noise\": the margin that decides the claim is smaller than the spread between two runs "
        "that differ only in their seed, so one run cannot tell; it counts as not holding. Each claim's numbers "
        "are in its section below."]
    return Section("Summary: the paper's claims", "every table and figure below", ["claim", "budget", *columns.values()],
                   rows,
                   notes=notes)


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def to_markdown(title: str, preamble: list[str], sections: list[Section], root: Path) -> str:
    out = [f"# {title}", ""]
    out += [p + "\n" for p in preamble]
    for s in sections:
        out += [f"## {s.heading}", "", f"*Paper: {s.source}*", ""]
        if s.rows:
            out.append("| " + " | ".join(s.header) + " |")
            out.append("|" + "---|" * len(s.header))
            out += ["| " + " | ".join(r) + " |" for r in s.rows]
            out.append("")
        for c in s.claims:
            out.append(f"- **{c.verdict}**: {c.line}")
        if s.claims:
            out.append("")
        out += [f"{n}\n" for n in s.notes]
        for f in s.figures:
            out += [f"![{f.stem}]({Path(f).relative_to(root).as_posix()})", ""]
    return "\n".join(out) + "\n"


def to_html(title: str, preamble: list[str], sections: list[Section]) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
             "th{background:#eee}td:first-child,th:first-child{text-align:left}.no{color:#b00;font-weight:bold}"
             ".yes{color:#070;font-weight:bold}img{max-width:100%;border:1px solid #ddd}</style></head><body>",
             f"<h1>{e(title)}</h1>"]
    parts += [f"<p>{e(p)}</p>" for p in preamble]
    for s in sections:
        parts += [f"<h2>{e(s.heading)}</h2>", f"<p><em>Paper: {e(s.source)}</em></p>"]
        if s.rows:
            parts.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in s.header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in s.rows]
            parts.append("</table>")
        if s.claims:
            parts.append("<ul>")
            for c in s.claims:
                cls = {True: "yes", False: "no", None: ""}[c.holds] if c.clear else ""
                parts.append(f"<li><span class='{cls}'>{e(c.verdict)}</span>: {e(c.line)}</li>")
            parts.append("</ul>")
        parts += [f"<p>{e(n)}</p>" for n in s.notes]
        for f in s.figures:
            data = base64.b64encode(Path(f).read_bytes()).decode()
            parts.append(f"<p><img alt='{e(Path(f).stem)}' src='data:image/png;base64,{data}'></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(out: Path, title: str, preamble: list[str], sections: list[Section]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / "REPORT.md", out / "REPORT.html"
    atomic_write_text(md, to_markdown(title, preamble, sections, out))
    atomic_write_text(page, to_html(title, preamble, sections))
    return md, page
