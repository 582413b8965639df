"""The cumulative spend of a report as a PNG: transcript level, naive sum asked, budget line.

Drawn on an Agg canvas directly (no pyplot), so it needs no display and leaves no global
figure state behind. matplotlib is imported when a plot is drawn: importing it took most of a
second, which every `dpsql` command paid before.
"""

from __future__ import annotations

import io
from itertools import accumulate

from .report import Report


def plot_png(report: Report) -> bytes:
    """PNG bytes of the ledger's information-privacy level over time, against its budget."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    totals = report.totals
    ax.axhline(totals.budget, color="#b22222", linewidth=1.5, label=f"budget {totals.budget:g}")
    if report.answers:
        first = report.answers[0].time
        times = [first, *(a.time for a in report.answers), report.generated]
        levels = [0.0, *report.levels]
        asked = [0.0, *accumulate(a.cost.epsilon for a in report.answers)]
        # matplotlib converts datetimes through its units registry, which its stubs do not know.
        ax.step(times, asked + asked[-1:], where="post", color="#888888",  # type: ignore[arg-type]
                linestyle="--", label="sum of epsilon asked (naive)")
        ax.step(times, levels + levels[-1:], where="post", color="#1f4e9c",  # type: ignore[arg-type]
                linewidth=2, label="transcript level L(sum of epsilon_dp)")
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    else:
        ax.set_xticks([])
        ax.text(0.5, 0.5, "no answers yet: nothing spent", transform=ax.transAxes,
                ha="center", va="center", color="#555555")
    top = max(totals.budget, totals.transcript_level, totals.epsilon_asked)
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("information-privacy level")
    ax.set_xlabel("time (UTC)")
    ax.set_title(f"Cumulative spend, k={totals.k}, eta={totals.eta:g}")
    figure.legend(loc="outside lower center", ncols=3, fontsize="small")
    ax.grid(alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
