"""C renderer for CPUs: OpenMP parallel loops, GCC vector types for vectorized stores."""

from __future__ import annotations

import re

from ..ir.nodes import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    Gather,
    IfThen,
    Prefetch,
    Seq,
    Stmt,
    VBinary,
    VCall,
    VCompare,
    VLoad,
    VReduce,
    VSelect,
    VStore,
)
from ..te.expr import Expr
from .c_base import _CMP_OPS, C_TYPES, DTYPE_BYTES, CStyleRenderer

_VOPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_MASK_OPS = {**_CMP_OPS, "and": "&", "or": "|"}  # comparisons as in C; masks combine bitwise
# a parallel loop whose nest stores fewer elements than this (accumulator updates included) runs on
# the calling thread: starting and joining the OpenMP team costs about a microsecond while its
# threads spin, tens of microseconds once they sleep (OMP_WAIT_POLICY=PASSIVE, or another process
# on the core), more than such a loop's own work
SERIAL_BELOW_ELEMENTS = 8192


def stored_elements(s: Stmt) -> int:
    """Elements a statement stores when it runs once: every loop iteration counted, a vector store
    as its lanes, a conditional store as if it ran (a measure of its work)."""
    if isinstance(s, For):
        return s.extent * stored_elements(s.body)
    if isinstance(s, Seq):
        return sum(stored_elements(t) for t in s.stmts)
    if isinstance(s, (IfThen, Allocate)):
        return stored_elements(s.body)
    return s.lanes if isinstance(s, VStore) else 1


class CpuRenderer(CStyleRenderer):
    """C11 + OpenMP + GCC vector extensions (``lanes`` float32 lanes per vector)."""

    def __init__(self, lanes: int = 8) -> None:
        self.lanes = lanes

    def prelude(self) -> str:
        text = "#include <math.h>\n#include <stdlib.h>\n#include <string.h>\n" + _vector_helpers(self.lanes)
        half = self.lanes // 2
        if half >= 4:  # the same helpers for half vectors (a loop of 24 lanes: one vector, one half)
            text += re.sub(r"\b(at_(?:v\w+|bcast|h(?:add|max|min)))\(", rf"\1{self.suffix(half)}(",
                           _vector_helpers(half))
        return text

    def suffix(self, lanes: int) -> str:
        """The name suffix of the helpers of vectors of ``lanes`` (none for whole vectors)."""
        return "" if lanes == self.lanes else f"_{lanes}"

    def loop_pragma(self, s: For) -> str | None:
        if s.kind == "parallel":
            return "#pragma omp parallel for" if stored_elements(s) >= SERIAL_BELOW_ELEMENTS else None
        if s.kind == "simd":
            return "#pragma omp simd"
        if s.kind == "unroll":
            return f"#pragma GCC unroll {min(s.extent, 64)}"
        return None

    def local_decl(self, b: Buffer) -> str:
        return f"{C_TYPES[b.dtype]} {b.name}[{b.size}] __attribute__((aligned(64)));"

    def register_decl(self, b: Buffer) -> str:
        if b.size in (self.lanes, self.lanes // 2) and b.size >= 4:
            return f"at_f32x{b.size} {b.name};"
        return super().register_decl(b)

    def heap_alloc(self, b: Buffer) -> tuple[str, str]:
        t = C_TYPES[b.dtype]
        nbytes = -(-(b.size * DTYPE_BYTES[b.dtype]) // 64) * 64
        return (f"{t}* {self.restrict} {b.name} = ({t}*)aligned_alloc(64, {nbytes});", f"free({b.name});")

    def vector_expr(self, e: Expr) -> str:
        x = self.suffix(getattr(e, "lanes", self.lanes))  # the helpers of half vectors carry their width
        if isinstance(e, VLoad):
            return f"at_vload{x}({e.buffer.name} + {self.expr(e.base)})"
        if isinstance(e, Broadcast):
            return f"at_bcast{x}({self.expr(e.value)})"
        if isinstance(e, VBinary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in _VOPS:
                return f"({a} {_VOPS[e.op]} {b})"
            return f"at_v{e.op}{x}({a}, {b})"
        if isinstance(e, VSelect) and isinstance(e.cond, VCompare):
            return f"at_vblend{x}({self.expr(e.cond)}, {self.expr(e.t)}, {self.expr(e.f)})"
        if isinstance(e, VSelect):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, VCompare):  # a mask: every bit of a lane set where the condition holds
            if e.op == "not":
                return f"(~{self.expr(e.a)})"
            return f"({self.expr(e.a)} {_MASK_OPS[e.op]} {self.expr(e.b)})"
        if isinstance(e, VCall):
            return f"at_v{e.name}{x}({self.expr(e.arg)})"
        if isinstance(e, VReduce):
            return f"at_h{e.op}{self.suffix(e.arg.lanes)}({self.expr(e.arg)})"
        if isinstance(e, Gather):
            return f"((at_f32x{e.lanes}){{{', '.join(self.expr(x) for x in e.elems)}}})"
        return super().vector_expr(e)

    def prefetch(self, s: Prefetch) -> str:
        # read access, moderate locality: the line goes to L2 (prefetcht1) without evicting L1
        return f"__builtin_prefetch({s.buffer.name} + {self.expr(s.index)}, 0, 2);"

    def vector_store(self, s: VStore) -> str:
        where = f"{s.buffer.name} + {self.expr(s.base)}"
        return f"at_vstore{self.suffix(s.lanes)}({where}, {self.expr(s.value)});"


def _vector_helpers(n: int) -> str:
    """The typedefs and inline helpers of float32 vectors of ``n`` lanes (GCC vector extensions)."""
    v = f"at_f32x{n}"
    # the AVX-512 forms of rounding and scaling: 16 lanes with AVX-512F (builtins that take a
    # rounding argument: 4, the current direction), 8 with AVX-512VL too
    isa_guard, rnd, scalef, mask, cur = {
        16: ("defined(__AVX512F__)", "rndscaleps", "scalefps512", "unsigned short", ", 4"),
        8: ("defined(__AVX512F__) && defined(__AVX512VL__)", "rndscaleps_256", "scalefps256",
            "unsigned char", ""),
    }.get(n, ("0", "", "", "", ""))
    return f"""typedef float {v} __attribute__((vector_size({4 * n})));
typedef int at_i32x{n} __attribute__((vector_size({4 * n})));
static inline {v} at_vload(const float* p) {{ {v} r; memcpy(&r, p, sizeof r); return r; }}
static inline void at_vstore(float* p, {v} v) {{ memcpy(p, &v, sizeof v); }}
static inline {v} at_bcast(float x) {{ return ({v}){{{", ".join(["x"] * n)}}}; }}
static inline {v} at_vblend(at_i32x{n} m, {v} t, {v} f) {{  /* m: a mask (lanes all ones or 0) */
  return ({v})((m & (at_i32x{n})t) | (~m & (at_i32x{n})f)); }}
static inline {v} at_vmax({v} a, {v} b) {{ return at_vblend(a > b, a, b); }}
static inline {v} at_vmin({v} a, {v} b) {{ return at_vblend(a < b, a, b); }}
/* the lanes of a vector combined: the end of a reduction whose lanes accumulated separately */
static inline float at_hadd({v} v) {{
  float s = v[0]; for (int i = 1; i < {n}; ++i) s += v[i]; return s; }}
static inline float at_hmax({v} v) {{
  float s = v[0]; for (int i = 1; i < {n}; ++i) s = fmaxf(s, v[i]); return s; }}
static inline float at_hmin({v} v) {{
  float s = v[0]; for (int i = 1; i < {n}; ++i) s = fminf(s, v[i]); return s; }}
/* round to the nearest integer, and y 2^t for integral t: one instruction each where the ISA has
   them (AVX-512's vrndscaleps and vscalefps, through gcc's builtins: immintrin.h would add a
   fifth of a second to every build), else through integer conversion and exponent bits */
#if {isa_guard} && defined(__GNUC__) && !defined(__clang__)
static inline {v} at_vround({v} x) {{  /* imm 8: to nearest, no exceptions */
  return __builtin_ia32_{rnd}_mask(x, 8, x, ({mask})-1{cur}); }}
static inline {v} at_vscale2({v} y, {v} t) {{
  return __builtin_ia32_{scalef}_mask(y, t, y, ({mask})-1{cur}); }}
static inline {v} at_vexp_domain({v} x) {{ return x; }}  /* vscalefps overflows to inf, underflows to 0 */
static inline {v} at_vnearbyint({v} x) {{ return at_vround(x); }}
#else
/* round half to even (Round): below 2^23 adding and taking away 2^23 with x's sign rounds in the
   current mode; from 2^23 on (and NaN) x is its own rounding; the sign bit is x's (so -0.4 -> -0) */
static inline {v} at_vnearbyint({v} x) {{
  at_i32x{n} sign = (at_i32x{n})x & (at_i32x{n})at_bcast(-0.0f);
  {v} c = ({v})(sign | (at_i32x{n})at_bcast(8388608.0f)), r = (x + c) - c;
  return at_vblend(at_vmax(x, -x) < 8388608.0f, ({v})((at_i32x{n})r | sign), x); }}
static inline {v} at_vround({v} x) {{
  x = x + 0.5f;
  {v} t = __builtin_convertvector(__builtin_convertvector(x, at_i32x{n}), {v});
  return t + __builtin_convertvector(t > x, {v}); }}  /* truncation -> floor (masks are -1) */
static inline {v} at_vscale2({v} y, {v} t) {{
  at_i32x{n} k = __builtin_convertvector(t, at_i32x{n}), h = k >> 1;  /* 2^k = 2^h 2^(k-h): */
  at_i32x{n} e1 = (h + 127) << 23, e2 = (k - h + 127) << 23;          /* both stay normal */
  return y * ({v})e1 * ({v})e2; }}
static inline {v} at_vexp_domain({v} x) {{  /* where the exponent bits stay in range */
  return at_vmin(at_vmax(x, at_bcast(-87.33654f)), at_bcast(88.72283f)); }}
#endif
/* exp on every lane: x = k ln2 + r (Cody-Waite split of ln2, |r| <= ln2 / 2), e^r by a degree-6
   polynomial (Cephes' expf coefficients, about 1 ulp), times 2^k; the portable scaling clamps its
   inputs to [-87.34, 88.72] */
static inline {v} at_vexp({v} x) {{
  x = at_vexp_domain(x);
  {v} t = at_vround(x * 1.44269504088896341f);
  x = x - t * 0.693359375f - t * -2.12194440e-4f;
  {v} y = x * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * (x * x) + x + 1.0f;
  return at_vscale2(y, t); }}
static inline {v} at_vsigmoid({v} x) {{ return 1.0f / (1.0f + at_vexp(-x)); }}
/* tanh: 1 - 2 / (e^2x + 1), and for |x| < 0.625 (where that cancels) the odd polynomial
   x + x^3 P(x^2) (Cephes' tanhf coefficients) */
static inline {v} at_vtanh({v} x) {{
  {v} e = at_vexp(x + x), big = 1.0f - 2.0f / (e + 1.0f), z = x * x;
  {v} p = z * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  {v} small = p * z * x + x;
  at_i32x{n} m = at_vmax(x, -x) < 0.625f;
  return ({v})((m & (at_i32x{n})small) | (~m & (at_i32x{n})big)); }}
"""
