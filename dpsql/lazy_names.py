"""A package's public names imported on first use: the package lists the module each name lives
in, and reading a name imports that module then, so importing the package loads nothing else
(`dpsql --version` and a query process load only what they use)."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing is not imported at run time (type checkers read it as true)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping
    from typing import Any


def first_use(package: str, namespace: MutableMapping[str, Any],
              homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package` (whose globals are `namespace`): a name in `homes`
    is read from its module, named relative to the package (a home of `.name` is the submodule
    itself), and kept in the namespace; any other name is an AttributeError."""

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home, package)
        value = module if home == f".{name}" else getattr(module, name)
        namespace[name] = value
        return value

    return attribute
