"""Calendar arithmetic as DuckDB does it, for the values a query's dates can take: DATE and
TIMESTAMP literals, EXTRACT parts and date_trunc units (by their canonical names), truncating
to a period, the periods meeting an interval, the values a part takes over some days, dates as
seconds since 1970 (how ranges carry them), and date_part written as EXTRACT."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from sqlglot import exp

from ..errors import PolicyError, QueryRefused
from ..policy import parse_time
from ..sql_types import SqlType

# EXTRACT's parts (and the functions YEAR(x), MONTH(x), ... that mean the same), each with
# the range of its values; YEAR's follows from the bounds of its argument.
PARTS: dict[str, tuple[int, int] | None] = {
    "YEAR": None, "QUARTER": (1, 4), "MONTH": (1, 12), "DAY": (1, 31), "DAYOFWEEK": (0, 6),
    "ISODOW": (1, 7), "DAYOFYEAR": (1, 366), "WEEK": (1, 53), "HOUR": (0, 23),
    "MINUTE": (0, 59), "SECOND": (0, 59)}
_PART_ALIASES = {"DOW": "DAYOFWEEK", "DOY": "DAYOFYEAR", "WEEKOFYEAR": "WEEK"}
PART_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Year: "YEAR", exp.Quarter: "QUARTER", exp.Month: "MONTH", exp.Day: "DAY",
    exp.DayOfMonth: "DAY", exp.DayOfWeek: "DAYOFWEEK", exp.DayOfWeekIso: "ISODOW",
    exp.DayOfYear: "DAYOFYEAR", exp.Week: "WEEK", exp.WeekOfYear: "WEEK", exp.Hour: "HOUR",
    exp.Minute: "MINUTE", exp.Second: "SECOND"}
TRUNC_UNITS = ("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR")
TRUNCS = (exp.TimestampTrunc, exp.DateTrunc)


def time_literal(text_value: str, kind: SqlType) -> dt.datetime:
    """The value of a DATE or TIMESTAMP literal (ISO, years 1 to 9999, no time zone)."""
    try:
        return parse_time(text_value, kind, f"{kind.upper()} literal")
    except PolicyError as exc:
        raise QueryRefused(str(exc)) from None


def time_part(node: exp.Expression) -> str:
    """The part an EXTRACT (or YEAR(x), MONTH(x), ...) takes, by its canonical name."""
    if not isinstance(node, exp.Extract):
        return PART_FUNCTIONS[type(node)]
    part = node.this
    name = part.this if isinstance(part, exp.Literal) and part.is_string else \
        part.name if isinstance(part, exp.Var) else ""
    name = _PART_ALIASES.get(name.upper(), name.upper())
    if name not in PARTS:
        raise QueryRefused(f"EXTRACT({part.sql(dialect='duckdb')} FROM ...) refused: the parts "
                           f"accepted are {', '.join(p.lower() for p in PARTS)} (dow: 0 = "
                           "Sunday; isodow: 1 = Monday)")
    return name


def trunc_unit(node: exp.Expression) -> str:
    """The unit of a date_trunc: one of TRUNC_UNITS."""
    unit = node.args.get("unit")
    name = unit.name.upper() if isinstance(unit, (exp.Var, exp.Literal)) else ""
    if name not in TRUNC_UNITS:
        shown = unit.sql(dialect="duckdb") if unit is not None else "?"
        raise QueryRefused(f"date_trunc({shown}, ...) refused: the units accepted are "
                           f"{', '.join(repr(u.lower()) for u in TRUNC_UNITS)}")
    return name


_EPOCH = dt.datetime(1970, 1, 1)


def seconds(moment: dt.datetime) -> float:
    """A date or timestamp as seconds since 1970-01-01 (how ranges carry dates)."""
    return (moment - _EPOCH).total_seconds()


def moment(value: float) -> dt.datetime:
    """The inverse of `seconds`."""
    return _EPOCH + dt.timedelta(seconds=value)


def truncate(value: dt.datetime, unit: str) -> dt.datetime:
    """The start of the period of `unit` (TRUNC_UNITS) holding `value`, as DuckDB's date_trunc
    computes it (weeks start on Monday)."""
    day = dt.datetime(value.year, value.month, value.day)
    if unit == "HOUR":
        return day.replace(hour=value.hour)
    if unit == "DAY":
        return day
    if unit == "WEEK":
        return day - dt.timedelta(days=day.weekday())
    if unit == "MONTH":
        return day.replace(day=1)
    if unit == "QUARTER":
        return day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    return day.replace(month=1, day=1)


def periods(first: dt.datetime, last: dt.datetime, unit: str, most: int) -> list[dt.datetime]:
    """The starts of every period of `unit` that meets [first, last], in order; a refusal when
    there are more than `most`."""
    found: list[dt.datetime] = []
    start: dt.datetime | None = truncate(first, unit)
    while start is not None and start <= last:
        if len(found) == most:
            raise QueryRefused(f"date_trunc('{unit.lower()}', ...) would have more than {most} "
                               f"periods from {first} to {last}; use a coarser unit or restrict "
                               "the dates in WHERE")
        found.append(start)
        start = _next_period(start, unit)
    return found


def _next_period(start: dt.datetime, unit: str) -> dt.datetime | None:
    try:
        if unit in ("HOUR", "DAY", "WEEK"):
            return start + {"HOUR": dt.timedelta(hours=1), "DAY": dt.timedelta(days=1),
                            "WEEK": dt.timedelta(days=7)}[unit]
        months = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}[unit]
        index = start.year * 12 + start.month - 1 + months
        return start.replace(year=index // 12, month=index % 12 + 1)
    except (OverflowError, ValueError):  # past 9999-12-31
        return None


_DAY_PARTS: dict[str, Callable[[dt.datetime], int]] = {  # as DuckDB computes them
    "YEAR": lambda d: d.year, "QUARTER": lambda d: (d.month - 1) // 3 + 1,
    "MONTH": lambda d: d.month, "DAY": lambda d: d.day, "DAYOFWEEK": lambda d: d.isoweekday() % 7,
    "ISODOW": lambda d: d.isoweekday(), "DAYOFYEAR": lambda d: d.timetuple().tm_yday,
    "WEEK": lambda d: d.isocalendar()[1]}
_ENUMERATED_DAYS = 400


def part_values(part: str, first: dt.datetime, last: dt.datetime) -> tuple[int, ...] | None:
    """The values a part of the day (not of the time) takes from `first` to `last`, in order,
    when they span at most 400 days; else None (the part's whole range applies)."""
    if part not in _DAY_PARTS or (last - first).days > _ENUMERATED_DAYS:
        return None
    days = periods(first, last, "DAY", _ENUMERATED_DAYS + 2)
    return tuple(sorted({_DAY_PARTS[part](day) for day in days}))


def normalize_times(tree: exp.Expression) -> exp.Expression:
    """A copy of `tree` with date_part('part', x) written as EXTRACT(part FROM x), the one form
    the whitelist types (sqlglot reads DuckDB's date_part as an unknown function)."""
    def rewrite_one(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("date_part", "datepart") \
                and len(node.expressions) == 2:
            part, value = node.expressions
            if isinstance(part, exp.Literal) and part.is_string:
                return exp.Extract(this=exp.var(part.this.upper()), expression=value)
        return node
    return tree.transform(rewrite_one)


# The interval units of a fixed length, in seconds (a calendar month or year has none).
FIXED_UNITS = {"WEEK": 604_800, "DAY": 86_400, "HOUR": 3_600, "MINUTE": 60, "SECOND": 1}


def interval_step(interval: exp.Interval) -> tuple[str, int] | None:
    """(unit, n) of a literal `INTERVAL n unit` with a whole number n (signed, parenthesized
    or not) and a unit named (singular or plural), else None."""
    amount, sign = interval.this, 1
    while isinstance(amount, (exp.Paren, exp.Neg)):
        sign = -sign if isinstance(amount, exp.Neg) else sign
        amount = amount.this
    unit = interval.args.get("unit")
    name = unit.name.upper().rstrip("S") if unit is not None else ""
    if not isinstance(amount, exp.Literal) or not amount.this.lstrip("-").isdigit() or not name:
        return None
    return name, sign * int(amount.this)
