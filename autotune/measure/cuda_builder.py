"""Compile CUDA programs into cached cubins with nvcc (mirrors builder.py)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .builder import Builder, BuildOptions, BuildResult, _run_compiler, _trim_stderr
from .errors import ErrorKind

_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")
_CACHE_FORMAT = "autotune-cuda-cubin-v1"
_INFO_SUFFIX = ".ptxas.json"

# -- kernel program ABI ---------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One kernel launch; `args` index the buffer list (inputs, outputs, workspace)."""

    kernel: str  # extern "C" symbol
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[int, ...]  # kernel params are float* in this order
    shared_bytes: int = 0  # dynamic shared memory


@dataclass(frozen=True)
class CudaProgram:
    """A .cu source plus the host launch sequence that computes the task."""

    source: str
    launches: tuple[Launch, ...]  # run in order
    workspace: tuple[int, ...] = ()  # bytes of extra device buffers after inputs+outputs

    def check(self, n_buffers: int) -> str | None:
        """None if the launch plan is well-formed for `n_buffers` task buffers, else why not."""
        if not self.launches:
            return "program has no launches"
        total = n_buffers + len(self.workspace)
        for i, size in enumerate(self.workspace):
            if not isinstance(size, int) or size < 0:
                return f"workspace {i}: bad size {size!r}"
        for i, ln in enumerate(self.launches):
            if not ln.kernel:
                return f"launch {i}: empty kernel name"
            for what, dims in (("grid", ln.grid), ("block", ln.block)):
                if len(dims) != 3 or not all(isinstance(d, int) and d >= 1 for d in dims):
                    return f"launch {i} ({ln.kernel}): bad {what} {dims!r}"
            if not isinstance(ln.shared_bytes, int) or ln.shared_bytes < 0:
                return f"launch {i} ({ln.kernel}): bad shared_bytes {ln.shared_bytes!r}"
            for a in ln.args:
                if not isinstance(a, int) or not 0 <= a < total:
                    return f"launch {i} ({ln.kernel}): buffer index {a!r} out of range ({total} buffers)"
        return None


# -- options, versions, ptxas report ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CudaBuildOptions(BuildOptions):
    """How to invoke nvcc (`compiler` is the nvcc path).

    `arch` (e.g. "sm_90") is required: take it from `query_device()["arch"]`.
    """

    arch: str
    compiler: str = "nvcc"
    flags: tuple[str, ...] = ("-O3",)
    timeout_s: float = 60.0
    cache_dir: Path | None = None  # None: ~/.cache/autotune/builds

    def __post_init__(self) -> None:
        if not _ARCH.match(self.arch):
            raise ValueError(f"arch must look like 'sm_90', got {self.arch!r}")


def _nvcc_version_text(nvcc: str) -> str:
    try:
        proc = subprocess.run([nvcc, "--version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def nvcc_version(nvcc: str = "nvcc") -> str:
    """The release line of `nvcc --version` (e.g. "... release 13.0, V13.0.88"), or "unknown"."""
    lines = _nvcc_version_text(nvcc).splitlines()
    rel = [ln.strip() for ln in lines if "release" in ln]
    if rel:
        return rel[0]
    return lines[-1].strip() if lines else "unknown"


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_NUMS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "barriers": re.compile(r"used (\d+) barriers"),
}


def parse_ptxas_info(text: str) -> dict[str, dict[str, int]]:
    """Parse `-Xptxas -v` output into {kernel: {registers, shared_bytes, spills, ...}}."""
    out: dict[str, dict[str, int]] = {}
    cur: dict[str, int] | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            cur = out.setdefault(m.group(1), dict.fromkeys(_NUMS, 0))
            continue
        if cur is None:
            continue
        for key, rx in _NUMS.items():
            hit = rx.search(line)
            if hit:
                cur[key] = int(hit.group(1))
    return out


def _nvcc_cmd(opts: CudaBuildOptions, src: str, out: str) -> list[str]:
    return [opts.compiler, "-cubin", f"-arch={opts.arch}", *opts.flags, "-Xptxas=-v", "-o", out, src]


def ptxas_info(
    source: str,
    arch: str,
    nvcc: str = "nvcc",
    flags: tuple[str, ...] = ("-O3",),
    timeout_s: float = 60.0,
) -> dict[str, dict[str, int]]:
    """Compile `source` once (uncached) and return ptxas' per-kernel resource usage.

    Raises RuntimeError if nvcc fails.
    """
    opts = CudaBuildOptions(arch=arch, compiler=nvcc, flags=flags, timeout_s=timeout_s)
    with tempfile.TemporaryDirectory(prefix="autotune-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        rc, err = _run_compiler(_nvcc_cmd(opts, src, os.path.join(tmp, "kernel.cubin")), tmp, timeout_s)
        if rc != 0:
            why = "timed out" if rc is None else _trim_stderr(err, tmp) or f"exit code {rc}"
            raise RuntimeError(f"nvcc failed: {why}")
        return parse_ptxas_info(err)


# -- builder --------------------------------------------------------------------


class CudaBuilder(Builder):
    """Builds CUDA sources into cubins, in parallel, with an on-disk cache.

    Each cubin `<key>.cubin` gets a `<key>.ptxas.json` beside it with ptxas'
    resource usage (see `resource_usage`).
    """

    options: CudaBuildOptions

    def __init__(self, options: CudaBuildOptions, workers: int | None = None) -> None:
        if not isinstance(options, CudaBuildOptions):
            raise TypeError("CudaBuilder needs CudaBuildOptions (with arch)")
        super().__init__(options, workers)

    def build(self, kernel_name: str, source: str | CudaProgram) -> BuildResult:
        """Build one source (`kernel_name` is only a label); a cache hit skips nvcc."""
        start = time.perf_counter()
        text = source.source if isinstance(source, CudaProgram) else source
        cache_dir = self._get_cache_dir()
        cubin = cache_dir / f"{self.cache_key(text)}.cubin"
        if cubin.is_file():
            return BuildResult(str(cubin), None, "", time.perf_counter() - start, True)
        kind, msg = self._compile(text, cubin, cache_dir)
        elapsed = time.perf_counter() - start
        if kind is not None:
            return BuildResult(None, kind, msg, elapsed, False)
        return BuildResult(str(cubin), None, "", elapsed, False)

    def cache_key(self, full_text: str) -> str:
        """sha256 over source, nvcc identity and version, flags and arch."""
        h = hashlib.sha256()
        parts = (
            _CACHE_FORMAT,
            full_text,
            self._get_fingerprint(),
            "\0".join(self.options.flags),
            self.options.arch,
        )
        for part in parts:
            h.update(part.encode())
            h.update(b"\0\0")
        return h.hexdigest()

    @staticmethod
    def resource_usage(cubin_path: str) -> dict[str, dict[str, int]]:
        """ptxas' per-kernel report for a cubin this builder made ({} if unknown)."""
        info = Path(cubin_path).with_suffix(_INFO_SUFFIX)
        try:
            data: Any = json.loads(info.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- internals ------------------------------------------------------------

    def _get_fingerprint(self) -> str:
        with self._lock:
            if self._fingerprint is None:
                nvcc = self.options.compiler
                path = shutil.which(nvcc) or nvcc
                self._fingerprint = "\n".join((path, _nvcc_version_text(nvcc) or "unknown"))
            return self._fingerprint

    def _compile(self, text: str, lib: Path, cache_dir: Path) -> tuple[ErrorKind | None, str]:
        # Same scheme as Builder: private temp dir on the cache's filesystem, then
        # os.replace, so a reader sees no cubin or a complete one.
        tmp_dir = tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir)
        try:
            src = os.path.join(tmp_dir, "kernel.cu")
            out = os.path.join(tmp_dir, "kernel.cubin")
            with open(src, "w") as f:
                f.write(text)
            try:
                rc, err = _run_compiler(_nvcc_cmd(self.options, src, out), tmp_dir, self.options.timeout_s)
            except OSError as e:
                return ErrorKind.BUILD_ERROR, f"cannot run nvcc: {e}"
            if rc is None:
                return ErrorKind.BUILD_TIMEOUT, f"nvcc killed after {self.options.timeout_s:g}s"
            if rc != 0 or not os.path.isfile(out):
                return ErrorKind.BUILD_ERROR, _trim_stderr(err, tmp_dir) or f"nvcc exited with code {rc}"
            info = os.path.join(tmp_dir, "info.json")
            with open(info, "w") as f:
                json.dump(parse_ptxas_info(err), f)
            os.replace(info, lib.with_suffix(_INFO_SUFFIX))
            os.replace(out, lib)
            return None, ""
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
