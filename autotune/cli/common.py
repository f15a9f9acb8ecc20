"""Shared pieces of the command-line tools: one-line errors with exit code 2, DB and target."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from records import RecordsError, TuningDatabase

from ..target import Target, cpu_target

TARGETS = ("cpu", "cuda")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def open_db(path: str, create: bool = True) -> TuningDatabase:
    try:
        return TuningDatabase(Path(path), create=create)
    except RecordsError as err:
        raise UsageError(str(err).splitlines()[0]) from None


def resolve_target(kind: str) -> Target:
    if kind == "cpu":
        return cpu_target()
    if kind == "cuda":
        raise UsageError("target 'cuda' has no backend yet (see the CUDA backend issue); valid targets: cpu")
    raise UsageError(f"unknown target {kind!r}; valid targets: {', '.join(TARGETS)}")
