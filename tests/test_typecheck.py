"""mypy over the installed package's layout (dpsql, dpsql.engine, dpsql.calibration), run in
the default suite so the whole checked code stays type-clean. Locally: this test, or the
command it prints on failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _layout(where: Path) -> Path:
    """A dpsql/ package of links to the checkout's files, with engine/ and calibration/ inside
    it, as setuptools installs them: mypy cannot follow the package-dir mapping."""
    package = where / "dpsql"
    package.mkdir()
    for path in (ROOT / "dpsql").glob("*.py"):
        (package / path.name).symlink_to(path)
    for folder in ("engine", "calibration"):
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return package


def test_mypy_is_clean(tmp_path: Path) -> None:
    _layout(tmp_path)
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(tmp_path / ".mypy_cache"), "-p", "dpsql"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"MYPYPATH": str(tmp_path), "PATH": ""})
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
