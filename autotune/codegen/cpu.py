"""C renderer for CPUs: OpenMP parallel loops, GCC vector types for vectorized stores."""

from __future__ import annotations

from ..ir.nodes import Broadcast, Buffer, For, Gather, VBinary, VLoad, VSelect, VStore
from ..te.expr import Expr
from .c_base import C_TYPES, DTYPE_BYTES, CStyleRenderer

_VOPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


class CpuRenderer(CStyleRenderer):
    """C11 + OpenMP + GCC vector extensions (``lanes`` float32 lanes per vector)."""

    def __init__(self, lanes: int = 8) -> None:
        self.lanes = lanes

    @property
    def vtype(self) -> str:
        return f"at_f32x{self.lanes}"

    def prelude(self) -> str:
        v, n = self.vtype, self.lanes
        return f"""#include <math.h>
#include <stdlib.h>
#include <string.h>
typedef float {v} __attribute__((vector_size({4 * n})));
typedef int at_i32x{n} __attribute__((vector_size({4 * n})));
static inline {v} at_vload(const float* p) {{ {v} r; memcpy(&r, p, sizeof r); return r; }}
static inline void at_vstore(float* p, {v} v) {{ memcpy(p, &v, sizeof v); }}
static inline {v} at_bcast(float x) {{ return ({v}){{{", ".join(["x"] * n)}}}; }}
static inline {v} at_vmax({v} a, {v} b) {{
  at_i32x{n} m = a > b; return ({v})((m & (at_i32x{n})a) | (~m & (at_i32x{n})b)); }}
static inline {v} at_vmin({v} a, {v} b) {{
  at_i32x{n} m = a < b; return ({v})((m & (at_i32x{n})a) | (~m & (at_i32x{n})b)); }}
"""

    def loop_pragma(self, s: For) -> str | None:
        if s.kind == "parallel":
            return "#pragma omp parallel for"
        if s.kind == "simd":
            return "#pragma omp simd"
        if s.kind == "unroll":
            return f"#pragma GCC unroll {min(s.extent, 64)}"
        return None

    def local_decl(self, b: Buffer) -> str:
        return f"{C_TYPES[b.dtype]} {b.name}[{b.size}] __attribute__((aligned(64)));"

    def heap_alloc(self, b: Buffer) -> tuple[str, str]:
        t = C_TYPES[b.dtype]
        nbytes = -(-(b.size * DTYPE_BYTES[b.dtype]) // 64) * 64
        return (f"{t}* {self.restrict} {b.name} = ({t}*)aligned_alloc(64, {nbytes});", f"free({b.name});")

    def vector_expr(self, e: Expr) -> str:
        if isinstance(e, VLoad):
            return f"at_vload({e.buffer.name} + {self.expr(e.base)})"
        if isinstance(e, Broadcast):
            return f"at_bcast({self.expr(e.value)})"
        if isinstance(e, VBinary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in _VOPS:
                return f"({a} {_VOPS[e.op]} {b})"
            return f"at_v{e.op}({a}, {b})"
        if isinstance(e, VSelect):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, Gather):
            return f"(({self.vtype}){{{', '.join(self.expr(x) for x in e.elems)}}})"
        return super().vector_expr(e)

    def vector_store(self, s: VStore) -> str:
        return f"at_vstore({s.buffer.name} + {self.expr(s.base)}, {self.expr(s.value)});"
