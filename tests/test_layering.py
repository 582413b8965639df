"""Import layering: calibration never imports the engine, and no engine module imports one of a
higher layer (docs/architecture.md lists the layers). Imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The engine's layers, lowest first: a module may import its own layer and those below.
ENGINE_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"display", "errors", "watchdog", "progress", "sql_types",
                             "plan_memo"})),
    ("values", frozenset({"policy", "policy_yaml", "policy_chain", "policy_dependence", "policy_fields",
                        "policy_lists", "result", "answer_table", "workload_result", "accuracy"})),
    ("rules", frozenset({"aggregates", "plan", "unnest_rows"})),
    ("query", frozenset({"sql", "rewrite", "stored_clamps", "sensitivity", "noise", "intervals", "postprocess",
                        "workload_strategy", "workload_intervals", "released_aggregates"})),
    ("storage", frozenset({"accounting"})),
    ("run", frozenset({"backends", "prepare", "release", "reuse", "reuse_marginal", "reuse_combine",
                      "reuse_intervals", "workload"})),
    ("owner", frozenset({"dependence_model", "dependence_data", "dependence_report", "chain_check",
                        "starter_policy"})),
    ("reporting", frozenset({"report"})),
    ("api", frozenset({"database", "workload_run"})),
    ("service", frozenset({"service"})),
    ("interface", frozenset({"cli", "commands", "commands_analyst", "commands_owner", "commands_output",
                            "__main__", "__init__", "progress_bar", "workload_cli"})),
)

# engine/sql/, lowest first: a module there imports only the ones before it (no circle).
SQL_ORDER = ("calendar", "scalars", "bounds", "harden", "parse", "nesting", "released", "join", "flatten",
             "domain_literals", "shifted_columns", "planning_limits", "columns", "scope", "link_columns",
             "join_order", "join_tree", "where", "key_values", "public_keys", "shifted_keys", "keys",
             "quantile_lists", "released_distinct", "two_level", "over_released", "unnest", "bind")


def _imports(path: Path, package: Path) -> list[tuple[str, int]]:
    """Every module `path` imports, as an absolute name with its line. The folder `package` is
    installed as `dpsql.<folder>`, so relative imports resolve there: in engine/plan.py
    `from .errors import X` is dpsql.engine.errors, `from ..calibration import Y` dpsql.calibration."""
    parts = ["dpsql", package.name, *path.relative_to(package).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    here = parts if path.name == "__init__.py" else parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            if node.module:
                found.append((".".join(base + [node.module]), node.lineno))
            else:
                found += [(".".join(base + [alias.name]), node.lineno) for alias in node.names]
    return found


def _engine_module(name: str) -> str | None:
    """'plan' for engine.plan or dpsql.engine.plan (and 'aggregates' for engine.aggregates.sum),
    '__init__' for the package itself, None outside the engine."""
    for prefix in ("engine", "dpsql.engine"):
        if name == prefix:
            return "__init__"
        if name.startswith(prefix + "."):
            return name[len(prefix) + 1:].split(".")[0]
    return None


def _layer(module: str) -> int:
    for index, (_, members) in enumerate(ENGINE_LAYERS):
        if module in members:
            return index
    raise AssertionError(f"engine module {module!r} has no layer: add it to ENGINE_LAYERS "
                         "(and to docs/architecture.md)")


def test_calibration_imports_nothing_from_the_engine() -> None:
    package = ROOT / "calibration"
    bad = [f"{path.relative_to(ROOT)}:{line} imports {name}"
           for path in sorted(package.rglob("*.py")) for name, line in _imports(path, package)
           if _engine_module(name) is not None]
    assert not bad, "calibration must not depend on the engine:\n" + "\n".join(bad)


def test_engine_imports_no_higher_layer() -> None:
    package = ROOT / "engine"
    bad = []
    for path in sorted(package.rglob("*.py")):
        importer = _engine_module("engine." + path.relative_to(package).with_suffix("").as_posix()
                                  .replace("/", "."))
        assert importer is not None
        for name, line in _imports(path, package):
            target = _engine_module(name)
            if target is not None and _layer(target) > _layer(importer):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({ENGINE_LAYERS[_layer(importer)][0]}) "
                           f"imports {target} ({ENGINE_LAYERS[_layer(target)][0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_every_engine_module_has_a_layer() -> None:
    package = ROOT / "engine"
    for path in package.rglob("*.py"):
        name = _engine_module("engine." + path.relative_to(package).with_suffix("").as_posix()
                              .replace("/", "."))
        assert name is not None
        _layer(name)


def test_the_sql_package_imports_in_its_order() -> None:
    package = ROOT / "engine"
    modules = {path.stem for path in (package / "sql").glob("*.py")} - {"__init__"}
    assert modules == set(SQL_ORDER), "list every engine/sql module in SQL_ORDER"
    bad = []
    for name in SQL_ORDER:
        path = package / "sql" / f"{name}.py"
        for target, line in _imports(path, package):
            inner = target.removeprefix("dpsql.engine.sql.")
            if target.startswith("dpsql.engine.sql.") and SQL_ORDER.index(inner.split(".")[0]) \
                    >= SQL_ORDER.index(name):
                bad.append(f"{path.relative_to(ROOT)}:{line} ({name}) imports {inner}")
    assert not bad, "engine/sql imports out of order:\n" + "\n".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """Relative imports resolve the way Python resolves them, so a violation is seen."""
    package = tmp_path / "engine"
    (package / "aggregates").mkdir(parents=True)
    (package / "plan.py").write_text("from .database import PrivateDatabase\nfrom ..calibration import x\n")
    (package / "aggregates" / "sum.py").write_text("from ..database import D\nfrom . import count\n")
    assert [n for n, _ in _imports(package / "plan.py", package)] == \
        ["dpsql.engine.database", "dpsql.calibration"]
    assert [n for n, _ in _imports(package / "aggregates" / "sum.py", package)] == \
        ["dpsql.engine.database", "dpsql.engine.aggregates.count"]
    assert _engine_module("dpsql.engine.database") == "database"
    assert _layer("database") > _layer("plan")


def test_the_engine_keeps_no_copy_of_the_modes_or_the_admission_test() -> None:
    """calibration owns the dependence modes (mode model too) and the admission comparison: no
    engine module lists the guarantee maps, tests for one by name, or applies the admission
    slack itself."""
    from dpsql.calibration import MODE_CHOICES, MODEL_MODE, MODES

    assert set(MODE_CHOICES) == set(MODES) | {"auto"}
    named = (*MODES, MODEL_MODE)
    bad = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in named]
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and len(names) >= 2:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} lists modes {names}")
            if isinstance(node, ast.Compare) and names:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} compares with mode {names}")
            if isinstance(node, ast.Name | ast.alias) and "ADMISSION_TOLERANCE" in ast.unparse(node):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} uses ADMISSION_TOLERANCE")
    assert not bad, "\n".join(bad)
