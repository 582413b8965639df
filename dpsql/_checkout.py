"""The old top-level names `engine` and `calibration`, in a checkout, as aliases of dpsql's.

A checkout has `engine/` and `calibration/` at its root, so `import engine` finds the folder
directly. Loaded that way the modules would be second copies of `dpsql.engine` (a second
`QueryRefused` class, a second plan cache), so the folders' `__init__` calls `alias` instead:
the old name and every module under it become the very objects imported as `dpsql.<name>`.
An installed dpsql never provides the old names (they would clash with other code).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

OLD_NAMES = ("engine", "calibration")


class _AliasLoader(importlib.abc.Loader):
    """Loads `engine.x` by importing `dpsql.engine.x` and putting that module in its place."""

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        # importlib returns whatever sys.modules holds under the name after exec_module.
        sys.modules[module.__name__] = importlib.import_module(f"dpsql.{module.__name__}")

    def get_code(self, fullname: str):
        """The real module's code, so that `python -m engine` and `-m calibration.table` run."""
        target = importlib.util.find_spec(f"dpsql.{fullname}")
        loader = getattr(target, "loader", None)
        if target is None or not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(f"no code for {fullname}", name=fullname)
        return loader.get_code(target.name)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds `engine.*` and `calibration.*` as aliases of the modules under `dpsql`."""

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname.split(".")[0] not in OLD_NAMES:
            return None
        real = importlib.util.find_spec(f"dpsql.{fullname}")
        if real is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(), is_package=real.submodule_search_locations is not None)


def alias(name: str) -> None:
    """Make the old top-level package `name` and its submodules the modules of `dpsql.<name>`."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
    sys.modules[name] = importlib.import_module(f"dpsql.{name}")
