"""README.md runs as written: its set-up command, the tour's shell commands and every fenced
python block, in document order, in a temporary copy of the example (so the tour spends the
budget the example left, exactly as a reader following the README would)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from dpsql.engine.policy_yaml import parse_policy

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Parts of the set-up commands that build the environment this test already runs in, or run
# this very suite; everything else is run.
ENVIRONMENT = (re.compile(r"^python3? -m venv \.venv$"), re.compile(r"^\.venv/bin/pip install "),
               re.compile(r"^\.venv/bin/python -m pytest\b"))


def readme_steps(text: str) -> list[tuple[str, str]]:
    """In the order they appear: ("shell", command) for each command of an indented block that
    starts with `.venv/bin/` or `python` and of each fenced sh/bash/shell block, ("python", code)
    for each fenced python block and ("yaml", text) for each fenced yaml block (a policy)."""
    steps: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)```(\w*)\s*$", line)
        if fence:
            indent, language = fence.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = textwrap.dedent("\n".join(lines[i + 1:end]))
            if language in ("python", "yaml"):
                steps.append((language, body))
            elif language in ("sh", "bash", "shell"):
                commands = re.sub(r"\\\n\s*", " ", body).splitlines()
                steps += [("shell", c.strip()) for c in commands if c.strip() and not c.startswith("#")]
            i = end + 1
            continue
        if line.startswith("    ") and re.match(r"^\s{4}(\.venv/bin/|python3? )", line) \
                and (i == 0 or not lines[i - 1].strip()):
            command = line.strip()
            while command.endswith("\\"):
                i += 1
                command = command[:-1].rstrip() + " " + lines[i].strip()
            steps.append(("shell", command))
        i += 1
    return steps


def _runnable(command: str) -> str | None:
    """The command without the parts that build the environment; None if nothing is left."""
    parts = [p.strip() for p in command.split("&&")]
    kept = [p for p in parts if not any(pattern.search(p) for pattern in ENVIRONMENT)]
    return " && ".join(kept) or None


def test_readme_has_the_steps_it_promises():
    kinds = [kind for kind, _ in readme_steps(README.read_text())]
    shell = [body for kind, body in readme_steps(README.read_text()) if kind == "shell"]
    assert kinds.count("python") >= 2 and kinds.count("yaml") >= 1
    assert any("examples/households.py" in body for body in shell)
    assert sum(body.startswith(".venv/bin/dpsql query") for body in shell) >= 1


def test_readme_runs_as_written_on_a_fresh_copy(tmp_path):
    venv = Path(sys.prefix)
    if not (venv / "bin" / "dpsql").exists():
        pytest.fail(f"run the suite from the README's .venv: {venv}/bin/dpsql does not exist")
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("out", "__pycache__"))
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    for kind, body in readme_steps(README.read_text()):
        if kind == "yaml":
            parse_policy(yaml.safe_load(body))  # the documented policy is a valid one
            continue
        if kind == "shell":
            command = _runnable(body)
            if command is None:
                continue
            proc = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True,
                                  timeout=300)
        else:
            proc = subprocess.run([str(tmp_path / ".venv" / "bin" / "python"), "-c", body], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"README {kind} step failed:\n{body}\n{proc.stdout}\n{proc.stderr}"
