"""The installed package is `dpsql` (distinctive names only); a checkout's old names `engine` and
`calibration` are the very same modules; `python -m dpsql`, `dpsql --version` work."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("engine", "calibration")


def _modules(folder: str) -> list[str]:
    """Dotted names (relative to the folder) of every module under a repository folder."""
    names = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


ALL_MODULES = [name for folder in FOLDERS for name in _modules(folder)]


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH, so only what is installed can be imported."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_old_and_new_names_are_the_same_objects():
    import calibration
    import dpsql
    import engine

    assert engine.QueryRefused is dpsql.QueryRefused
    assert calibration.CalibrationError is dpsql.CalibrationError
    assert engine.PrivateDatabase is dpsql.PrivateDatabase
    for name in ALL_MODULES:
        old = importlib.import_module(name)
        assert old is importlib.import_module(f"dpsql.{name}"), f"{name} is a second copy"
    copies = [m for m in sys.modules if m.split(".")[0] in FOLDERS
              and sys.modules[m] is not sys.modules.get(f"dpsql.{m}")]
    assert not copies, f"modules loaded twice: {copies}"


_OUTSIDE = """
import importlib, importlib.util, sys
import dpsql
names = sys.argv[1:]
for name in names:
    importlib.import_module("dpsql." + name)
assert importlib.util.find_spec("engine") is None, "an installed top-level 'engine'"
assert importlib.util.find_spec("calibration") is None, "an installed top-level 'calibration'"
assert isinstance(dpsql.QueryRefused("x"), ValueError)
print(dpsql.__version__, dpsql.__file__)
"""


def test_installed_package_imports_from_outside_the_checkout(tmp_path):
    """From another directory only `dpsql` is importable, and every module imports under it
    (an absolute `from calibration import ...` inside the package would fail here)."""
    proc = subprocess.run([sys.executable, "-c", _OUTSIDE, *ALL_MODULES], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in version["project"]["dynamic"]
    assert proc.stdout.split()[0] == importlib.import_module("dpsql").__version__


def test_other_code_named_engine_and_calibration_does_not_clash(tmp_path):
    """A project with its own `engine` and `calibration` packages can use dpsql beside them."""
    for name in FOLDERS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"MINE = {name!r}\n")
    script = ("import dpsql, engine, calibration\n"
              "assert engine.MINE == 'engine' and calibration.MINE == 'calibration'\n"
              "assert dpsql.calibrate(1.0, dpsql.DependenceModel(2, 0.1)).epsilon_dp > 0.5\n"
              "import dpsql.engine.cli\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=_clean_env())
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("command", [["-m", "dpsql", "--version"], ["console-script", "--version"]])
def test_version_from_python_m_and_the_console_script(tmp_path, command):
    if command[0] == "console-script":
        argv = [str(Path(sys.executable).parent / "dpsql"), *command[1:]]
    else:
        argv = [sys.executable, *command]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"dpsql, version {importlib.import_module('dpsql').__version__}"


def test_python_m_dpsql_runs_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpsql", "calibrate", "--epsilon", "1", "--k", "2",
                           "--eta", "0.1", "--format", "json"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert '"tight"' in proc.stdout


def test_python_m_runs_modules_by_their_old_names_in_a_checkout():
    """README's `python -m calibration.table` runs the module's code (through the alias)."""
    from calibration.table import markdown_table

    proc = subprocess.run([sys.executable, "-m", "calibration.table"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == markdown_table().strip()


def test_every_subpackage_is_listed_for_installation():
    """setuptools installs only the listed packages: a new sub-folder must be listed too."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"dpsql"} | {
        "dpsql." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(config["packages"]) == folders
    assert config["package-dir"] == {f"dpsql.{f}": f for f in FOLDERS}


def test_package_code_imports_its_own_parts_relatively():
    """Inside the package, `engine`/`calibration` are not importable names once installed:
    code under engine/ must write `from ..calibration import X`, under calibration/
    `from .model import X` (the one exception: the checkout alias in each `__init__`)."""
    offenders = []
    for folder in (*FOLDERS, "dpsql"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                if any(name.split(".")[0] in FOLDERS for name in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"absolute imports of engine/calibration inside the package: {offenders}"


@pytest.mark.slow
def test_built_wheel_holds_every_module_and_imports_outside_the_checkout(tmp_path):
    """Build the real wheel, unpack it as an installation would, and import every module."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
                    str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("dpsql-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        archive.extractall(site)
    assert tops == {"dpsql", wheel.name.split("-py")[0] + ".dist-info"}
    env = {**_clean_env(), "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", _OUTSIDE, *ALL_MODULES], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1].startswith(str(site))
