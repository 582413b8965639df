"""Text shown to people: numbers formatted one way everywhere, untrusted text made harmless.

Analysts choose SQL text, aliases and names; the data owner reads them back in `report`. Control
and format characters (terminal escape codes, carriage returns, bidirectional overrides) are
shown visibly, e.g. ESC as `\\x1b`, so that no output can drive a terminal or hide text. CSV
cells that a spreadsheet would read as a formula get a leading quote.
"""

from __future__ import annotations

import html
import math
import numbers
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np

_KEPT = frozenset("\n\t")
_INVISIBLE = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def visible(text: str) -> str:
    """`text` with every control or format character except newline and tab written as an escape."""
    return "".join(_escape(c) if c not in _KEPT and unicodedata.category(c) in _INVISIBLE else c
                   for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def number(value) -> str:
    """A readable number: integers with separators, floats with digits that fit their size."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return visible(str(value))
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    value = float(value)  # numpy floats included
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 1:
        return f"{value:,.2f}"
    return f"{value:.3g}"


def cell(value, halfwidth: float, possible: tuple[float, float] | None = None) -> str:
    """One answer cell: a key as it is; a noisy value (`possible`: what its statistic can be)
    with its 95% half-width, or its interval as [low to high] where value ± half-width reaches
    beyond what the statistic can be ("too few rows" when that is all it can be), or "no
    interval" when none could be computed."""
    shown = number(value) if isinstance(value, float) else visible(str(value))
    if possible is None or value is None:
        return shown
    if halfwidth != halfwidth:
        return f"{shown} (no interval)"
    if isinstance(value, float) and value != value:  # NULL: its half-width is the noise's
        return f"{shown} ± {number(halfwidth)}"
    least, most = possible
    low, high = float(value) - halfwidth, float(value) + halfwidth
    if least <= low and high <= most:
        return f"{shown} ± {number(halfwidth)}"
    low, high = max(low, least), min(high, most)
    whole = " (too few rows)" if low <= least and high >= most else ""
    return f"{shown} [{number(low)} to {number(high)}]{whole}"


def cut(value, halfwidth: float, possible: tuple[float, float] | None) -> list[float] | None:
    """The interval a noisy cell shows, [low, high] within what its statistic can be; None
    for a key, a NULL value or a cell without an interval."""
    if possible is None or value is None or halfwidth != halfwidth \
            or not isinstance(value, numbers.Real) or value != value:
        return None
    return [max(float(value) - halfwidth, possible[0]), min(float(value) + halfwidth, possible[1])]


def csv_text(value):
    """A CSV cell: text that a spreadsheet would run as a formula gets a leading quote."""
    if not isinstance(value, str):
        return value
    value = visible(value)
    return "'" + value if value.startswith(_FORMULA_START) else value


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], caption: str = "") -> str:
    """An HTML table of text cells, every cell escaped (for Jupyter's `_repr_html_`)."""
    head = "".join(f"<th>{_h(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_h(c)}</td>" for c in row) + "</tr>" for row in rows)
    title = f"<caption>{_h(caption)}</caption>" if caption else ""
    return f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_paragraphs(*lines: str) -> str:
    """Escaped text lines as HTML paragraphs."""
    return "".join(f"<p>{_h(line)}</p>" for line in lines)


def _h(text: str) -> str:
    return html.escape(visible(text), quote=True)
