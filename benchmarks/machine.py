"""The machine a benchmark ran on, as every results section states it."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path


def machine() -> str:
    """Cores, memory, CPU model, OS and library versions of this run."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")))
    libs = ", ".join(f"{name} {metadata.version(name)}"
                     for name in ("duckdb", "opendp", "sqlglot", "pandas", "numpy"))
    return (f"{os.cpu_count()} cores ({cpu}), {mem_kb / 2**20:.1f} GiB memory, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}; {libs}")
