"""Report output: JSON keys, the PNG plot, the self-contained HTML page, Markdown, the CLI."""

from __future__ import annotations

import base64
import io
import json
import re
from dataclasses import fields
from html.parser import HTMLParser

import matplotlib.image
import pytest
from dpsql.engine.accounting.ledger import Charge, Ledger
from dpsql.engine.cli import main
from dpsql.engine.display import number
from dpsql.engine.report.build import build_report
from dpsql.engine.report.plot import plot_png, spend_figure
from dpsql.engine.report.render import render_html, render_markdown, render_table
from dpsql.engine.report.values import ReportTotals
from dpsql.engine.result import AnswerCost

from tests.support import record_charge, write_policy
from tests.test_report import AGGREGATE, DEPENDENT, RECORD, write_ledger

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HOSTILE_SQL = "SELECT COUNT(*) FROM people WHERE note = '</code><script>alert(1)</script> | `x` [b]y[/b]'"
TOP_KEYS = ["ledger", "generated", "analyst", "totals", "analysts", "entries", "notes"]
ENTRY_KEYS = ["id", "time", "analyst", "sql", "epsilon", "epsilon_dp", "mode", "k", "eta", "columns_read",
              "aggregates", "cumulative_epsilon_dp", "transcript_level"]


@pytest.fixture
def ledger(tmp_path):
    path = write_ledger(tmp_path / "ledger.sqlite", [("alice", 0.5, "auto"), ("bob", 0.4, "tight")])
    book = Ledger(path, DEPENDENT)
    record_charge(book, Charge("mallory", HOSTILE_SQL, AnswerCost(0.2, 0.1, "tight", 10, 0.001), (RECORD,)))
    book.close()
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    """Run the dpsql CLI; return its exit code, stdout and stderr."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    return exited.value.code, out.out, out.err


class PageParser(HTMLParser):
    """Collects what a browser would show: table cells by table id, images, scripts, links."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        self.urls += [v for k, v in attrs.items() if k in ("src", "href", "action") and v]
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []
        elif tag == "img":
            self.images.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(page: str) -> PageParser:
    parser = PageParser()
    parser.feed(page)
    parser.close()
    return parser


def test_json_is_valid_and_its_keys_are_stable(ledger, tmp_path, capsys):
    code, out, _ = run(capsys, "report", "--ledger", str(ledger), "--format", "json")
    assert code == 0
    payload = json.loads(out)
    assert list(payload) == TOP_KEYS
    assert list(payload["totals"]) == [f.name for f in fields(ReportTotals)]
    assert [list(e) for e in payload["entries"]] == [ENTRY_KEYS] * 3
    assert list(payload["entries"][0]["aggregates"][0]) == list(AGGREGATE)
    assert payload["entries"][2]["sql"] == HOSTILE_SQL
    assert payload["totals"]["answers"] == 3
    empty = write_ledger(tmp_path / "empty.sqlite", [])
    code, out, _ = run(capsys, "report", "--ledger", str(empty), "--format", "json")
    assert code == 0
    payload_empty = json.loads(out)
    assert list(payload_empty) == TOP_KEYS and list(payload_empty["totals"]) == list(payload["totals"])
    assert payload_empty["entries"] == [] and payload_empty["totals"]["spent_dp"] == 0.0


@pytest.mark.parametrize("answers", [0, 3])
def test_plot_is_a_valid_png_showing_the_spend(tmp_path, answers):
    asks = [("a", 0.5, "auto")] * answers
    report = build_report(write_ledger(tmp_path / "l.sqlite", asks))
    data = plot_png(report)
    assert data.startswith(PNG_SIGNATURE)
    pixels = matplotlib.image.imread(io.BytesIO(data), format="png")
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels[..., :3].std() > 0.05, "the image is blank"
    # The transcript level is drawn in blue; an empty ledger has no level line.
    blue = ((abs(pixels[..., 0] - 0x1F / 255) < 0.05) & (abs(pixels[..., 2] - 0x9C / 255) < 0.05)).sum()
    assert (blue > 500) == (answers > 0)


def test_plot_runs_on_answer_numbers_with_the_largest_epsilon_in_its_title(tmp_path):
    """A burst of three answers is three steps at answers 1, 2, 3 (not one jump in time), and
    the headline is the largest epsilon still askable."""
    report = build_report(write_ledger(tmp_path / "l.sqlite", [("a", 0.5, "auto")] * 3))
    axes = spend_figure(report).axes[0]
    level = next(line for line in axes.get_lines() if "transcript level" in str(line.get_label()))
    assert list(level.get_xdata()) == [0, 1, 2, 3]
    assert list(level.get_ydata()) == pytest.approx([0.0, *report.levels])
    assert axes.get_xlabel() == "answer number"
    assert f"Largest epsilon still askable: {number(report.totals.largest_epsilon)}" in axes.get_title()
    budget = [line for line in axes.get_lines() if str(line.get_label()).startswith("budget")]
    assert list(budget[0].get_ydata()) == [report.totals.budget] * 2


def test_html_page_shows_totals_tables_and_embedded_plot(ledger):
    report = build_report(ledger)
    page = parse(render_html(report))
    totals = {row[0]: row[1] for row in page.tables["totals"]}
    shown = {label.split(" under ")[0]: value for label, value in totals.items()}
    t = report.totals  # shown as `query` shows numbers; JSON has them in full
    assert shown["DP spent: Σε_dp"] == number(t.spent_dp)
    assert shown["transcript IP level L(Σε_dp)"] == number(t.transcript_level)
    assert shown["Σε asked (sum of per-answer levels)"] == number(1.1)
    assert shown["bound on I(X_i; Y), bits"] == number(t.information_bits)
    assert shown["level headroom (IP): budget − L(Σε_dp)"] == number(t.remaining)
    assert shown["remaining (DP): L⁻¹(budget) − Σε_dp"] == number(t.remaining_dp)
    assert [row[0] for row in page.tables["analysts"][1:]] == ["alice", "bob", "mallory"]
    entries = page.tables["entries"][1:]
    assert [row[3] for row in entries][2] == HOSTILE_SQL
    [image] = page.images
    assert image.startswith("data:image/png;base64,")
    assert base64.b64decode(image.split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_html_page_is_self_contained_and_inert(ledger):
    page_text = render_html(build_report(ledger))
    page = parse(page_text)
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert all(url.startswith("data:") for url in page.urls)
    assert not re.search(r"https?://", page_text)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page_text


def test_html_of_an_empty_ledger_is_a_valid_page(tmp_path):
    page = parse(render_html(build_report(write_ledger(tmp_path / "l.sqlite", []))))
    totals = {row[0]: row[1] for row in page.tables["totals"]}
    assert totals["answers released"] == "0" and totals["level headroom (IP): budget − L(Σε_dp)"] == "4"
    assert "entries" not in page.tables and len(page.images) == 1


def test_markdown_tables_survive_pipes_and_backticks_in_sql(ledger):
    text = render_markdown(build_report(ledger))
    answers = text.split("## Answers")[1].strip().splitlines()
    cells = [len(re.findall(r"(?<!\\)\|", line)) for line in answers]
    assert len(set(cells)) == 1 and len(answers) == 5
    assert "`` SELECT COUNT(*) FROM people WHERE note = '</code><script>alert(1)</script> \\| `x`" in text
    assert "| transcript IP level L(Σε\\_dp) under k=10, η=0.001 from dependence.eta (the default " \
        "for every column set) |" in text


def test_table_shows_totals_and_sql_literally(ledger):
    report = build_report(ledger)
    text = render_table(report, width=200)
    assert "Totals (whole ledger)" in text and f" {number(report.totals.transcript_level)} " in text
    assert "[b]y[/b]" in text
    assert "levels do not add up" in text


def test_cli_writes_html_and_plot_files(ledger, tmp_path, capsys):
    page, plot = tmp_path / "report.html", tmp_path / "spend.png"
    code, out, err = run(capsys, "report", "--ledger", str(ledger), "--format", "html",
                         "--output", str(page), "--plot", str(plot))
    assert (code, out, err) == (0, "", "")
    assert parse(page.read_text(encoding="utf-8")).tables["totals"]
    assert plot.read_bytes().startswith(PNG_SIGNATURE)


def test_cli_analyst_filter_says_so(ledger, capsys):
    code, out, _ = run(capsys, "report", "--ledger", str(ledger), "--format", "markdown",
                       "--analyst", "bob")
    assert code == 0
    assert "only the 1 answer(s) of analyst bob out of 3" in out
    assert "| answers released | 3 |" in out


def test_cli_empty_ledger_is_a_clear_report(tmp_path, capsys):
    code, out, _ = run(capsys, "report", "--ledger", str(write_ledger(tmp_path / "l.sqlite", [])))
    assert code == 0 and "no answers yet" in out


@pytest.mark.parametrize("extra, message", [
    (["--plot", "spend.jpg"], "--plot must name a .png file"),
    (["--analyst", "  "], "analyst must be a non-empty name"),
    (["--format", "pdf"], "Invalid value for '--format'"),
])
def test_cli_bad_arguments_are_one_line_errors(ledger, capsys, extra, message):
    code, out, err = run(capsys, "report", "--ledger", str(ledger), *extra)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_cli_missing_ledger_and_policy_mismatch_are_one_line_errors(ledger, tmp_path, capsys):
    code, _, err = run(capsys, "report", "--ledger", str(tmp_path / "none.sqlite"))
    assert code == 2 and "ledger file not found" in err and err.count("\n") == 1
    assert not (tmp_path / "none.sqlite").exists()
    policy = write_policy(tmp_path / "p.yaml", {"budget": {"epsilon": 9.0},
                                                "dependence": {"k": 10, "eta": 0.001}})
    code, _, err = run(capsys, "report", "--ledger", str(ledger), "--policy", str(policy))
    assert code == 2 and "budget = 4.0, but the given policy has budget = 9.0" in err
    assert err.count("\n") == 1


def test_cli_unwritable_output_is_a_one_line_error(ledger, tmp_path, capsys):
    code, _, err = run(capsys, "report", "--ledger", str(ledger), "--output",
                       str(tmp_path / "no" / "such" / "dir.txt"))
    assert code == 2 and err.startswith("error: cannot write") and err.count("\n") == 1
