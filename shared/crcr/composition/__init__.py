"""The composition root: each function's dependencies, built once per cold start, in a module of its own."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any


def __getattr__(name: str) -> Any:
    """`crcr.composition.<builder>` for the tools that name a builder (the bench, crcr local's probes): the module of
    the package that defines it, imported then. A function's handler imports its own module instead."""
    for module in pkgutil.iter_modules(__path__):
        found = importlib.import_module(f"{__name__}.{module.name}")
        if name in vars(found):
            return getattr(found, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
