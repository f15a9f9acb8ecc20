"""How the command line talks: one logging configuration (``-v``/``-q``) on stderr, progress bars
on stderr, and with ``--json`` the JSON summary alone on stdout (every human line goes to stderr),
so ``autotune tune ... --json | jq`` works."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from typing import Any, Callable, Iterator

# loggers of this project: INFO by default, DEBUG with -v; others stay at WARNING unless -vv
PROJECT_LOGGERS = ("autotune", "records", "cost_model", "schedules")
_JSON_OUT: list[Any] = []  # the real stdout while a --json command runs


def add_output_args(p: argparse.ArgumentParser) -> None:
    """-v (more: per-batch lines, -vv every library's debug lines) and -q (warnings and errors only,
    no progress bar)."""
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more diagnostics on stderr (-v: one line per tuning batch; -vv: debug of every "
                   "library)")
    p.add_argument("-q", "--quiet", action="count", default=0,
                   help="only warnings and errors on stderr, no progress bar")


class _StderrHandler(logging.Handler):
    """Writes to the current sys.stderr (looked up per record) without breaking a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            from tqdm import tqdm

            tqdm.write(msg, file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {msg}"
        if record.levelno <= logging.DEBUG:
            return f"[{record.name}] {msg}"
        return msg


def configure_logging(verbose: int = 0, quiet: int = 0) -> None:
    """The one logging configuration of a command: a handler on the root logger writing to stderr;
    the project's loggers at INFO (DEBUG with -v, WARNING with -q), other libraries at WARNING
    (DEBUG with -vv). Calling it again replaces the previous configuration."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    root.setLevel(logging.DEBUG if verbose >= 2 and not quiet else logging.WARNING)
    for name in PROJECT_LOGGERS:
        logging.getLogger(name).setLevel(level)


@contextlib.contextmanager
def human_lines_to_stderr(enabled: bool) -> Iterator[None]:
    """While a ``--json`` command runs: whatever it prints goes to stderr; ``emit_json`` writes to
    the real stdout."""
    if not enabled:
        yield
        return
    _JSON_OUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _JSON_OUT.pop()


def emit_json(obj: Any) -> None:
    """Print ``obj`` as one line of JSON on stdout (the real one under ``human_lines_to_stderr``)."""
    out = _JSON_OUT[-1] if _JSON_OUT else sys.stdout
    out.write(json.dumps(obj) + "\n")
    out.flush()


def with_output(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command's run function: configure logging from -v/-q, send human lines to stderr under
    --json, and turn progress bars off under -q."""

    def wrapped(args: argparse.Namespace) -> int:
        quiet = getattr(args, "quiet", 0)
        configure_logging(getattr(args, "verbose", 0), quiet)
        if quiet and hasattr(args, "no_progress"):
            args.no_progress = True
        with human_lines_to_stderr(bool(getattr(args, "json", False))):
            return run(args)

    return wrapped
