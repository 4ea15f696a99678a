"""The class report: one self-contained HTML page an instructor looks at.

Four things, each a figure or a table: the distribution of final scores (a
row per student, and per unmatched file), the pass rate of every test (after
the instructor's adjustments), the count of each status, and the submissions
flagged for a look (with why). Figures are drawn with matplotlib and embedded
as PNG (base64 ``data:`` URLs), each with alt text saying what it shows; the
page loads nothing from the network.
"""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from pathlib import Path

__all__ = ["write_report"]


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _figures(crows: list) -> list[tuple[str, str]]:
    """(PNG data URL, alt text) for the score histogram, the test pass rates, the statuses."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out = []
    pct = [100 * c.final / c.max_score for c in crows if c.max_score]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.hist(pct, bins=[i * 10 for i in range(11)], color="#4c72b0", edgecolor="white")
    ax.set(xlabel="final score (% of the maximum)", ylabel="rows", title="Final scores")
    ax.yaxis.get_major_locator().set_params(integer=True)
    mean = sum(pct) / len(pct) if pct else 0.0
    out.append(
        (
            _png(fig),
            f"Histogram of final scores of {len(pct)} rows, in bins of 10 %; mean {mean:.1f} %.",
        )
    )
    passed: Counter = Counter()
    ran: Counter = Counter()
    for c in crows:
        if c.row is None or c.row.spec is None:
            continue
        for t in c.row.spec.tests:
            ran[t.id] += 1
            passed[t.id] += c.row.earned.get(t.id, 0) >= t.points
    tests = list(ran)
    if tests:
        rates = [100 * passed[t] / ran[t] for t in tests]
        fig, ax = plt.subplots(figsize=(6, 0.3 * len(tests) + 1))
        ax.barh(range(len(tests)), rates, color="#55a868")
        ax.set_yticks(range(len(tests)), tests, fontsize=7)
        ax.invert_yaxis()
        ax.set(xlim=(0, 100), xlabel="submissions passing (%)", title="Pass rate of each test")
        worst = min(zip(rates, tests, strict=True))
        alt = f"Bar chart of the pass rate of {len(tests)} tests; lowest: {worst[1]} at {worst[0]:.0f} %."
        out.append((_png(fig), alt))
    statuses = Counter(c.status for c in crows)
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(statuses) + 1))
    names = sorted(statuses, key=lambda s: -statuses[s])
    ax.barh(range(len(names)), [statuses[s] for s in names], color="#c44e52")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set(xlabel="rows", title="Statuses")
    ax.xaxis.get_major_locator().set_params(integer=True)
    alt = "Bar chart of statuses: " + ", ".join(f"{s} {statuses[s]}" for s in names) + "."
    out.append((_png(fig), alt))
    return out


def _table(crows: list) -> str:
    lines = ["<tr><th>student</th><th>submission</th><th>status</th><th>why to look</th></tr>"]
    for c in crows:
        flags = list(c.row.flags) if c.row is not None else []
        if c.row is not None and c.row.stopped_by:
            flags.append(f"stopped by the grader's {c.row.stopped_by} limit")
        if c.note:
            flags.append(c.note)
        if not flags:
            continue
        who = c.student.id if c.student else ""
        cells = [who, c.row.submission if c.row is not None else "", c.status, "; ".join(flags)]
        lines.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    return "<table>" + "\n".join(lines) + "</table>" if len(lines) > 1 else "<p>None.</p>"


def write_report(crows: list, path: str | Path, title: str) -> None:
    """Write the class report of ``crows`` (:class:`~course_grader.gradebook.ClassRow`)."""
    figures = "\n".join(
        f'<figure><img src="{src}" alt="{html.escape(alt)}"><figcaption>{html.escape(alt)}'
        "</figcaption></figure>"
        for src, alt in _figures(crows)
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:auto}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:90%}}table{{border-collapse:collapse}}
figcaption{{font-size:85%;color:#444}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>{len(crows)} rows.</p>
{figures}
<h2>Flagged for a look</h2>
{_table(crows)}
</body></html>
"""
    Path(path).write_text(page, encoding="utf-8")
