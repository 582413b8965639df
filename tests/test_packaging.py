"""The installed package is `dpsql` (distinctive names only, one import name for every module);
`python -m dpsql`, `dpsql --version` work, and the built wheel installs and runs outside the checkout."""

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


def _imports_by_folder_name(folders: tuple[str, ...]) -> list[str]:
    """`file:line` of every absolute import of `engine` or `calibration` under the folders."""
    offenders = []
    for folder in folders:
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
    return offenders


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH, so only what is installed can be imported."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_everything_imports_dpsql_by_its_one_name():
    """Tests, benchmarks, examples and the docs' code import `dpsql`, `dpsql.engine` and
    `dpsql.calibration` only: the folders' own names are no import name (no alias, no hook)."""
    offenders = _imports_by_folder_name(("tests", "benchmarks", "examples"))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            words = line.split()
            if words[:1] in (["from"], ["import"]) and len(words) > 1 \
                    and words[1].split(".")[0] in FOLDERS:
                offenders.append(f"{doc.relative_to(ROOT)}:{number}")
    assert not offenders, f"imports by a folder's name instead of dpsql's: {offenders}"
    hooks = [f for f in sys.meta_path if "dpsql" in type(f).__module__]
    assert not hooks, f"import hooks of dpsql installed: {hooks}"


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


def test_python_m_runs_a_calibration_module():
    """README's `python -m dpsql.calibration.table` runs the module's code."""
    from dpsql.calibration.table import markdown_table

    proc = subprocess.run([sys.executable, "-m", "dpsql.calibration.table"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=_clean_env())
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
    `from .model import X`."""
    offenders = _imports_by_folder_name((*FOLDERS, "dpsql"))
    assert not offenders, f"absolute imports of engine/calibration inside the package: {offenders}"


def test_built_wheel_installs_in_a_new_venv_and_runs_the_example(tmp_path):
    """`pip wheel .` builds a wheel holding the package alone; installed into a new venv outside
    the checkout (its dependencies taken from this environment), every module imports, the
    `dpsql` command runs and so does the bundled example."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(wheels), str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("dpsql-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
    assert tops == {"dpsql", wheel.name.split("-py")[0] + ".dist-info"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The dependencies come from this environment's site-packages (a plain path: its .pth files,
    # among them the checkout's editable install, are not read), the package from the wheel.
    deps = sysconfig_purelib()
    (site / "dependencies.pth").write_text(deps + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", str(wheel)], check=True, capture_output=True, timeout=600)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = _clean_env()
    proc = subprocess.run([str(python), "-c", _OUTSIDE, *ALL_MODULES], cwd=outside,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1].startswith(str(site))
    proc = subprocess.run([str(venv / "bin" / "dpsql"), "--version"], cwd=outside,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("dpsql, version ")
    example = outside / "households.py"
    example.write_text((ROOT / "examples" / "households.py").read_text())
    proc = subprocess.run([str(python), str(example), "--out", str(outside / "out")], cwd=outside,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (outside / "out" / "ledger.sqlite").is_file()
    assert "exact audit on the generator: level" in proc.stdout, proc.stdout[-2000:]


def sysconfig_purelib() -> str:
    """This environment's site-packages folder."""
    import sysconfig

    return sysconfig.get_path("purelib")


def test_the_lock_pins_an_admitted_duckdb_and_ci_runs_the_lowest_too():
    """The README installs requirements.lock; its DuckDB is the newest admitted release, and CI
    runs the release-sensitive tests again under the lowest (tests/duckdb_releases.py)."""
    from packaging.version import Version

    from tests import duckdb_releases

    lowest, newest = Version(duckdb_releases.lowest()), Version(duckdb_releases.newest())
    assert lowest < newest, "at least two DuckDB releases are admitted and tested"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-c requirements.lock" in ci and "tests.duckdb_releases lowest" in ci
    readme = (ROOT / "README.md").read_text()
    assert readme.count('pip install -q -c requirements.lock -e ".[test]"') == 2
    import duckdb

    assert Version(duckdb.__version__) in (lowest, newest), duckdb.__version__
    for test in duckdb_releases.RELEASE_SENSITIVE:
        assert (ROOT / test).is_file(), test
