"""CUDA renderer: the C-style renderer with GPU thread binding, shared memory, barriers, float4."""

from __future__ import annotations

from ..ir.nodes import (
    Allocate,
    AllReduce,
    Barrier,
    Broadcast,
    Buffer,
    For,
    Gather,
    Stmt,
    VBinary,
    VCall,
    VLoad,
    VSelect,
    VStore,
)
from ..ir.simplify import aligned
from ..te.expr import Expr
from .c_base import C_TYPES, CStyleRenderer
from .cp_async import CUDA_CP_ASYNC

_PRELUDE = """#define AT_INF __int_as_float(0x7f800000)
__device__ __forceinline__ float4 at_bcast4(float x) { return make_float4(x, x, x, x); }
__device__ __forceinline__ float4 at_add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float4 at_sub4(float4 a, float4 b) { return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }
__device__ __forceinline__ float4 at_mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 at_div4(float4 a, float4 b) { return make_float4(a.x / b.x, a.y / b.y, a.z / b.z, a.w / b.w); }
__device__ __forceinline__ float4 at_max4(float4 a, float4 b) { return make_float4(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w)); }
__device__ __forceinline__ float4 at_exp4(float4 a) { return make_float4(expf(a.x), expf(a.y), expf(a.z), expf(a.w)); }
__device__ __forceinline__ float at_sigmoid1(float a) { return 1.0f / (1.0f + expf(-a)); }
__device__ __forceinline__ float4 at_sigmoid4(float4 a) { return make_float4(at_sigmoid1(a.x), at_sigmoid1(a.y), at_sigmoid1(a.z), at_sigmoid1(a.w)); }
__device__ __forceinline__ float4 at_tanh4(float4 a) { return make_float4(tanhf(a.x), tanhf(a.y), tanhf(a.z), tanhf(a.w)); }
__device__ __forceinline__ float4 at_nearbyint4(float4 a) {
  return make_float4(rintf(a.x), rintf(a.y), rintf(a.z), rintf(a.w)); }
__device__ __forceinline__ float4 at_min4(float4 a, float4 b) { return make_float4(fminf(a.x, b.x), fminf(a.y, b.y), fminf(a.z, b.z), fminf(a.w, b.w)); }
"""


class CudaRenderer(CStyleRenderer):
    """``extern "C" __global__`` kernels; loops bound to blockIdx/threadIdx become index reads."""

    lowp_backend = "cuda"

    def __init__(
        self, block_dims: dict[str, int] | None = None, lanes: int = 4, dynamic_shared: dict[str, int] | None = None
    ) -> None:
        self.block_dims = block_dims or {}
        self.lanes = lanes
        # shared buffers placed in the kernel's dynamic shared memory: name -> byte offset
        self.dynamic_shared = dynamic_shared or {}

    def prelude(self) -> str:
        return _PRELUDE + CUDA_CP_ASYNC

    def float_literal(self, value: float, dtype: str) -> str:
        text = super().float_literal(value, dtype)
        return text.replace("-INFINITY", "(-AT_INF)").replace("INFINITY", "AT_INF")

    def render_kernel(self, name: str, params: list[Buffer], body: Stmt, threads: int) -> str:
        """One kernel; ``threads`` is the block size for __launch_bounds__."""
        sig = ", ".join(f"{C_TYPES[b.dtype]}* {self.restrict} {b.name}" for b in params)
        lines = [f'extern "C" __global__ void __launch_bounds__({threads}) {name}({sig}) {{']
        if self.dynamic_shared:
            lines.append(f"{self.indent_unit}extern __shared__ __align__(16) unsigned char at_smem[];")
        lines += self.stmt(body, 1)
        lines.append("}")
        return "\n".join(lines)

    def stmt(self, s: Stmt, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        if isinstance(s, For) and s.kind.startswith("threadIdx"):
            return self.bound_loop(s, depth, s.kind, self.block_dims.get(s.kind, s.extent))
        if isinstance(s, For) and s.kind.startswith("blockIdx"):
            return self.bound_loop(s, depth, s.kind, s.extent)
        if isinstance(s, Barrier):
            return [f"{pad}__syncthreads();"]
        if isinstance(s, AllReduce):
            return self.allreduce(s, pad)
        if isinstance(s, Allocate) and s.buffer.name in self.dynamic_shared:
            t = C_TYPES[s.buffer.dtype]
            decl = f"{t}* {self.restrict} {s.buffer.name} = ({t}*)(at_smem + {self.dynamic_shared[s.buffer.name]});"
            return [pad + "{", pad + self.indent_unit + decl] + self.stmt(s.body, depth + 1) + [pad + "}"]
        if isinstance(s, Allocate) and s.buffer.scope in ("local", "shared"):
            qual = "__shared__ " if s.buffer.scope == "shared" else ""
            decl = f"{qual}{C_TYPES[s.buffer.dtype]} {s.buffer.name}[{s.buffer.size}] __align__(16);"
            return [pad + "{", pad + self.indent_unit + decl] + self.stmt(s.body, depth + 1) + [pad + "}"]
        if isinstance(s, Allocate):
            raise ValueError(f"global buffer {s.buffer.name} inside a CUDA kernel: it must be a workspace")
        return super().stmt(s, depth)

    def allreduce(self, s: AllReduce, pad: str) -> list[str]:
        """Every thread of the block ends with the combined value: warp shuffles, then one shared
        slot per warp (whole warps); shuffles over the live lanes (a block of 2, 4, 8 or 16
        threads); otherwise one shared slot per thread."""
        threads = self.block_dims.get("threadIdx.x", 1)
        comb = {"sum": "({a} + {b})", "max": "fmaxf({a}, {b})", "min": "fminf({a}, {b})"}[s.combiner]
        ref = f"{s.buffer.name}[{self.expr(s.index)}]"
        lines = [f"{pad}{{", f"{pad}  float at_v = {ref};"]
        if threads % 32 and (threads > 32 or threads & (threads - 1)):
            lines += _combine_in_shared(pad, threads, "at_red[threadIdx.x] = at_v;", comb)
            return lines + [f"{pad}  {ref} = at_v;", f"{pad}}}"]
        width = min(threads, 32)
        mask = "0xffffffffu" if width == 32 else f"0x{(1 << width) - 1:x}u"
        lines += [
            f"{pad}  #pragma unroll",
            f"{pad}  for (int at_o = {width // 2}; at_o > 0; at_o >>= 1) at_v = "
            + comb.format(a="at_v", b=f"__shfl_xor_sync({mask}, at_v, at_o)")
            + ";",
        ]
        if threads > 32:
            # the shared array holds 32 slots whatever the warp count (up to 1024 threads)
            store = "if ((threadIdx.x & 31) == 0) at_red[threadIdx.x >> 5] = at_v;"
            lines += _combine_in_shared(pad, threads // 32, store, comb, size=32)
        return lines + [f"{pad}  {ref} = at_v;", f"{pad}}}"]

    def loop_pragma(self, s: For) -> str | None:
        if s.kind in ("unroll", "vthread"):
            return "#pragma unroll"
        return None

    def vector_expr(self, e: Expr) -> str:
        if isinstance(e, VLoad):
            b = self.expr(e.base)
            if aligned(e.base, 4) and e.lanes == 4:
                return f"(*(const float4*)({e.buffer.name} + {b}))"
            return "make_float4(" + ", ".join(f"{e.buffer.name}[{b} + {i}]" for i in range(e.lanes)) + ")"
        if isinstance(e, Broadcast):
            return f"at_bcast4({self.expr(e.value)})"
        if isinstance(e, VBinary):
            return f"at_{e.op}4({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, VSelect):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, VCall):
            return f"at_{e.name}4({self.expr(e.arg)})"
        if isinstance(e, Gather):
            return "make_float4(" + ", ".join(self.expr(x) for x in e.elems) + ")"
        return super().vector_expr(e)

    def vector_store(self, s: VStore) -> str:
        b = self.expr(s.base)
        v = self.expr(s.value)
        if aligned(s.base, 4):
            return f"*(float4*)({s.buffer.name} + {b}) = {v};"
        return (
            "{ float4 at_t = "
            + v
            + "; "
            + " ".join(f"{s.buffer.name}[{b} + {i}] = at_t.{c};" for i, c in enumerate("xyzw"))
            + " }"
        )


def _combine_in_shared(pad: str, slots: int, store: str, comb: str, size: int | None = None) -> list[str]:
    """Each contributor stores its value to a shared slot (``store``); after a barrier every
    thread combines the ``slots`` values into ``at_v``."""
    return [
        f"{pad}  __shared__ float at_red[{size or slots}];",
        f"{pad}  __syncthreads();",
        f"{pad}  {store}",
        f"{pad}  __syncthreads();",
        f"{pad}  at_v = at_red[0];",
        f"{pad}  for (int at_w = 1; at_w < {slots}; ++at_w) at_v = " + comb.format(a="at_v", b="at_red[at_w]") + ";",
    ]
