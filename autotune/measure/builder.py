"""Compile kernel sources (plus timing harness) into cached shared libraries."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from .errors import ErrorKind
from .harness import full_source, is_c_identifier

_MAX_ERROR_LINES = 20
_MAX_LINE_CHARS = 300


@dataclass(frozen=True)
class BuildOptions:
    """How to invoke the C compiler."""

    compiler: str = "gcc"
    flags: tuple[str, ...] = (
        "-O3",
        "-march=native",
        "-fopenmp",
        "-fPIC",
        "-shared",
        "-std=gnu11",
        "-ffp-contract=fast",
    )
    timeout_s: float = 30.0
    cache_dir: Path | None = None  # None: ~/.cache/autotune/builds


@dataclass(frozen=True)
class BuildResult:
    """Outcome of one build; `lib_path` is None on failure."""

    lib_path: str | None
    error_kind: ErrorKind | None
    error_msg: str
    build_s: float
    cached: bool

    @property
    def ok(self) -> bool:
        """True if a library was produced."""
        return self.error_kind is None and self.lib_path is not None


def compiler_version(compiler: str = "gcc") -> str:
    """First line of `compiler --version`, or "unknown" if it cannot be run."""
    try:
        proc = subprocess.run(
            [compiler, "--version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else "unknown"


def _native_target_info(compiler: str, flags: tuple[str, ...]) -> str:
    # -march=native means different code on different hosts; a cache shared
    # over a network home must not hand one host's .so to another (SIGILL).
    arch = [f for f in flags if f.startswith(("-march=", "-mtune=", "-mcpu="))]
    if not any("native" in f for f in arch):
        return ""
    try:
        proc = subprocess.run(
            [compiler, *arch, "-Q", "--help=target"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown-native"
    return proc.stdout


def _trim_stderr(text: str, tmp_dir: str) -> str:
    text = text.replace(tmp_dir + os.sep, "")
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    # Warnings can precede the real problem; start at the first error line.
    start = next((i for i, ln in enumerate(lines) if "error" in ln), 0)
    kept = [ln[:_MAX_LINE_CHARS] for ln in lines[start : start + _MAX_ERROR_LINES]]
    if len(lines) - start > _MAX_ERROR_LINES:
        kept.append("...")
    return "\n".join(kept)


def _run_compiler(cmd: list[str], cwd: str, timeout_s: float) -> tuple[int | None, str]:
    """Run the compiler; returns (returncode, stderr), returncode None on timeout."""
    # Own session so that on timeout the whole group (cc1, as, ld) dies,
    # not just the gcc driver.
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return None, ""
    return proc.returncode, err


class Builder:
    """Builds kernels into shared libraries, in parallel, with an on-disk cache."""

    def __init__(self, options: BuildOptions = BuildOptions(), workers: int | None = None) -> None:
        self.options = options
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._fingerprint: str | None = None
        self._cache_dir: Path | None = None

    # -- public API -----------------------------------------------------------

    def build(self, kernel_name: str, source: str) -> BuildResult:
        """Build one kernel; a cache hit returns without invoking the compiler."""
        start = time.perf_counter()
        if not is_c_identifier(kernel_name):
            return BuildResult(
                None,
                ErrorKind.BUILD_ERROR,
                f"invalid kernel name {kernel_name!r}",
                0.0,
                False,
            )
        text = full_source(kernel_name, source)
        cache_dir = self._get_cache_dir()
        lib = cache_dir / f"{self.cache_key(text)}.so"
        if lib.is_file():
            return BuildResult(str(lib), None, "", time.perf_counter() - start, True)
        kind, msg = self._compile(text, lib, cache_dir)
        elapsed = time.perf_counter() - start
        if kind is not None:
            return BuildResult(None, kind, msg, elapsed, False)
        return BuildResult(str(lib), None, "", elapsed, False)

    def build_many(self, items: list[tuple[str, str]]) -> list[BuildResult]:
        """Build (kernel_name, source) pairs in parallel; results keep input order."""
        if not items:
            return []
        if self.workers == 1 or len(items) == 1:
            return [self.build(name, src) for name, src in items]
        pool = self._get_pool()
        return list(pool.map(lambda it: self.build(it[0], it[1]), items))

    def cache_key(self, full_text: str) -> str:
        """sha256 over compiled text, compiler identity and flags."""
        h = hashlib.sha256()
        for part in (full_text, self._get_fingerprint(), "\0".join(self.options.flags)):
            h.update(part.encode())
            h.update(b"\0\0")
        return h.hexdigest()

    def close(self) -> None:
        """Shut down the build thread pool."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------

    def _get_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                # Threads suffice: each one just waits on its own gcc process.
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="autotune-build")
            return self._pool

    def _get_fingerprint(self) -> str:
        with self._lock:
            if self._fingerprint is None:
                comp = self.options.compiler
                path = shutil.which(comp) or comp
                self._fingerprint = "\n".join(
                    (
                        path,
                        compiler_version(comp),
                        _native_target_info(comp, self.options.flags),
                    )
                )
            return self._fingerprint

    def _get_cache_dir(self) -> Path:
        with self._lock:
            if self._cache_dir is None:
                d = self.options.cache_dir
                if d is None:
                    d = Path.home() / ".cache" / "autotune" / "builds"
                d = Path(d).expanduser()
                d.mkdir(parents=True, exist_ok=True)
                self._cache_dir = d
            return self._cache_dir

    def _compile(self, text: str, lib: Path, cache_dir: Path) -> tuple[ErrorKind | None, str]:
        # Build in a private temp dir inside the cache dir (same filesystem), then
        # os.replace: readers see either no file or a complete one.
        tmp_dir = tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir)
        try:
            src = os.path.join(tmp_dir, "kernel.c")
            out = os.path.join(tmp_dir, "kernel.so")
            with open(src, "w") as f:
                f.write(text)
            cmd = [self.options.compiler, *self.options.flags, "-o", out, src, "-lm"]
            try:
                rc, err = _run_compiler(cmd, tmp_dir, self.options.timeout_s)
            except OSError as e:
                return ErrorKind.BUILD_ERROR, f"cannot run compiler: {e}"
            if rc is None:
                return (
                    ErrorKind.BUILD_TIMEOUT,
                    f"compiler killed after {self.options.timeout_s:g}s",
                )
            if rc != 0 or not os.path.isfile(out):
                msg = _trim_stderr(err, tmp_dir) or f"compiler exited with code {rc}"
                return ErrorKind.BUILD_ERROR, msg
            os.replace(out, lib)
            return None, ""
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
