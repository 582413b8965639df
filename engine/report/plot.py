"""The cumulative spend of a report as a PNG: transcript level and naive sum asked against the
answer number, the budget line, and the largest epsilon still askable in the title.

Drawn on an Agg canvas directly (no pyplot), so it needs no display and leaves no global
figure state behind. matplotlib is imported when a plot is drawn: importing it took most of a
second, which every `dpsql` command paid before.
"""

from __future__ import annotations

import io
from itertools import accumulate
from typing import TYPE_CHECKING

from ..display import number
from .values import Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def spend_figure(report: Report) -> Figure:
    """The ledger's information-privacy level after each answer (answer 0: nothing spent),
    against its budget. Answers, not wall-clock time, are the x axis: a burst of answers is
    one step each, and nothing stretches to the moment of the report."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(8, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    totals = report.totals
    ax.axhline(totals.budget, color="#b22222", linewidth=1.5, label=f"budget {totals.budget:g}")
    if report.answers:
        numbers = list(range(len(report.answers) + 1))
        levels = [0.0, *report.levels]
        asked = [0.0, *accumulate(a.cost.epsilon for a in report.answers)]
        ax.step(numbers, asked, where="post", color="#888888", linestyle="--",
                label="sum of epsilon asked (naive)")
        ax.step(numbers, levels, where="post", color="#1f4e9c", linewidth=2,
                label="transcript level L(sum of epsilon_dp)")
        ax.set_xlim(0, max(len(report.answers), 1))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        ax.set_xticks([])
        ax.text(0.5, 0.5, "no answers yet: nothing spent", transform=ax.transAxes,
                ha="center", va="center", color="#555555")
    top = max(totals.budget, totals.transcript_level, totals.epsilon_asked)
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel("information-privacy level")
    ax.set_xlabel("answer number")
    ax.set_title(f"Largest epsilon still askable: {number(totals.largest_epsilon)} "
                 f"(level {number(totals.transcript_level)} of budget {number(totals.budget)}; "
                 f"k={totals.k}, eta={totals.eta:g})")
    figure.legend(loc="outside lower center", ncols=3, fontsize="small")
    ax.grid(alpha=0.3)
    return figure


def plot_png(report: Report) -> bytes:
    """PNG bytes of `spend_figure`."""
    buffer = io.BytesIO()
    spend_figure(report).savefig(buffer, format="png")
    return buffer.getvalue()
