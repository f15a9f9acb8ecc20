"""Tensor-core matrix products: a reduction tile mapped to warp-level ``mma.sync``.

A tensorized GEMM (``schedule.TensorizeStep``) is generated from one kernel body written once in
a small C dialect whose primitives are the warp instructions:

- ``AT_CP_ASYNC16`` / ``AT_CP_COMMIT`` / ``AT_CP_WAIT(n)``: ``cp.async`` 16-byte global->shared
  copies in commit groups (``codegen.cp_async``), a ``stages``-deep pipeline (zero-fill past the
  matrix edge);
- ``AT_LDMATRIX_X4[_T]``: ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``;
- ``AT_MMA``: ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` or ``m16n8k8 ... tf32``.

The CUDA rendering defines them as inline PTX; the emulation rendering (C + OpenMP, one team per
block) defines them as functions that execute them per lane with PTX's fragment layouts: a
collective instruction publishes each lane's operand (row address or registers) in a per-warp
exchange area, the team meets at a barrier, and each lane assembles its result from its peers'
data (two exchange areas used alternately, so one barrier per instruction suffices); ``cp.async``
copies are queued per thread and performed only when a ``cp.async.wait_group`` retires their
group (``codegen.cp_async``).

Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8"; g = lane >> 2,
t = lane % 4): m16n8k16 A regs (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs
(k 2t..2t+1, n g), (k 2t+8.., n g); m16n8k8 tf32 A (g, t), (g+8, t), (g, t+4), (g+8, t+4), B
(k t, n g), (k t+4, n g); C/D (g, 2t..2t+1), (g+8, 2t..2t+1). ldmatrix: lane 8i+r gives the
address of row r of matrix i; lane 4r+w receives 32-bit word w of row r (``.trans``: of the
transposed matrix).

Shared tiles are stored like their operand in global memory (rows of the operand's contiguous
dim), in 16-byte chunks; ``swizzle`` XORs the chunk index with the row's place in its span of
banks (``swizzle_text``) against bank conflicts. Split-K writes per-part partial products to a workspace summed by a second kernel.
TF32 fragments are read from shared memory one element per register and rounded with
``cvt.rna.tf32.f32`` (ldmatrix moves 16-bit elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cp_async import CUDA_CP_ASYNC, EMULATION_CP_ASYNC, EMULATION_QUEUE_DECL, EMULATION_QUEUE_FREE
from .lowp import C_PRELUDE, CUDA_PRELUDE, from_float, to_float

WARP = 32


@dataclass(frozen=True)
class GemmView:
    """A batched matrix product ``C[b] = A[b] @ B[b]`` as stored: A ``mk`` (k contiguous) or
    ``km``; B ``kn`` (n contiguous) or ``nk``; a batch-less operand is shared by every batch."""

    batch: int
    m: int
    n: int
    k: int
    a_layout: str
    b_layout: str
    a_batched: bool
    b_batched: bool
    dtype: str  # float16 | bfloat16 | float32 (TF32)
    # gathered operands (a convolution's input as implicit GEMM): a C expression of the element's
    # float value at (at_gm or at_gn, at_gk, at_b) reading the inputs in0, in1 (16-bit through
    # AT_TO_FLOAT); stored in shared memory k-contiguous, loaded by plain loads
    a_expr: str | None = None
    b_expr: str | None = None
    # the output element of (at_row, at_col, at_b) when C is not [batch][m][n]
    c_offset: str | None = None
    a_arg: int = 0  # which input A is (B is the other)
    # the output element as C text of the product's value ``at_v`` (and the inputs, at_row,
    # at_col, at_b): bias, activation, residual fused after the product; None stores the product
    epilogue: str | None = None
    # the kernel's inputs in0, in1, ... (default: the two operands in the product's dtype)
    in_dtypes: tuple[str, ...] = ()
    # gathered operands: consecutive threads take consecutive rows (m of A, n of B) instead of
    # consecutive k, where the operand's memory runs along its rows (coalesced loads)
    a_rows_fastest: bool = False
    b_rows_fastest: bool = False

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.in_dtypes or (self.dtype, self.dtype)

    @property
    def esz(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def kstep(self) -> int:
        """k of one mma instruction."""
        return 8 if self.dtype == "float32" else 16


@dataclass(frozen=True)
class TensorCoreTile:
    """Block and warp tiles, pipeline depth, swizzle and split-K of a tensorized GEMM."""

    block_m: int
    block_n: int
    block_k: int
    warp_m: int
    warp_n: int
    stages: int
    swizzle: int
    split_k: int

    @property
    def warps(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n)

    @property
    def threads(self) -> int:
        return self.warps * WARP


def shared_bytes(view: GemmView, tile: TensorCoreTile) -> int:
    """Dynamic shared memory of the pipeline: ``stages`` tiles of A and of B."""
    return tile.stages * (tile.block_m + tile.block_n) * tile.block_k * view.esz


def tile_problem(view: GemmView, tile: TensorCoreTile, max_shared: int, max_threads: int = 1024) -> str | None:
    """Why ``tile`` cannot compute ``view`` on a device with these limits, or None."""
    t = tile
    epc = 16 // view.esz  # elements per 16-byte chunk
    contiguous = {"mk": view.k, "km": view.m, "kn": view.n, "nk": view.k}
    plain = [lay for lay, e in ((view.a_layout, view.a_expr), (view.b_layout, view.b_expr)) if e is None]
    if any(contiguous[lay] % epc for lay in plain):
        return f"a contiguous dim is not a multiple of {epc} elements (16-byte copies)"
    if t.warp_m % 16 or t.warp_n % 16 or t.block_m % t.warp_m or t.block_n % t.warp_n:
        return "warp tiles must be multiples of 16 dividing the block tile"
    if t.block_k % max(16, epc) or t.block_k % view.kstep:
        return f"block_k must be a multiple of {max(16, epc, view.kstep)}"
    for v in (t.block_m, t.block_n, t.block_k):
        if v & (v - 1):
            return "tile sizes must be powers of two"
    if t.stages < 2:
        return "a pipeline needs at least 2 stages"
    if t.split_k < 1 or t.split_k > max(1, math.ceil(view.k / t.block_k)):
        return "split_k must leave every part at least one k tile"
    if not WARP <= t.threads <= max_threads:
        return f"{t.threads} threads per block"
    if shared_bytes(view, t) > max_shared:
        return f"{shared_bytes(view, t)} bytes of shared memory > {max_shared}"
    return None


def swizzle_text(chunk: str, row: str, chunks_per_row: int) -> str:
    """The 16-byte chunk where (row, chunk) of a tile is stored: the chunk index XORed with the
    row's position among the rows that share a 128-byte span of banks (rows of fewer than 8
    chunks pack 8 / chunks_per_row to a span), so the 8 rows one ldmatrix phase reads fall in 8
    distinct 16-byte bank groups. (C text, also a Python expression.)"""
    cpr = chunks_per_row
    if cpr < 2 or cpr & (cpr - 1):
        return f"({chunk})"
    shift = max(0, (8 // cpr).bit_length() - 1)
    return f"(({chunk}) ^ ((({row}) >> {shift}) & {min(cpr, 8) - 1}))"


# ---------------------------------------------------------------------------------------------
# the kernel body, shared by both renderings


class _Body:
    def __init__(self, view: GemmView, tile: TensorCoreTile) -> None:
        self.v, self.t = view, tile
        self.epc = 16 // view.esz
        bm, bn, bk = tile.block_m, tile.block_n, tile.block_k
        # stored tiles: (rows, row elements) per operand
        self.a_rows, self.a_len = (bm, bk) if view.a_layout == "mk" else (bk, bm)
        self.b_rows, self.b_len = (bk, bn) if view.b_layout == "kn" else (bn, bk)
        self.a_tile = bm * bk * view.esz
        self.b_tile = bn * bk * view.esz
        self.kps = math.ceil(math.ceil(view.k / tile.split_k) / bk) * bk  # k per split part

    def swz(self, chunk: str, row: str, row_len: int) -> str:
        """C text of the stored 16-byte chunk of (row, chunk): see ``swizzle_text``."""
        return swizzle_text(chunk, row, row_len * self.v.esz // 16) if self.t.swizzle else f"({chunk})"

    def addr(self, base: str, row: str, col: str, row_len: int) -> str:
        """Byte address of element (row, col) of a stored tile."""
        esz = self.v.esz
        return (f"({base} + ({row}) * {row_len * esz} + {self.swz(f'({col}) / {self.epc}', row, row_len)} * 16"
                f" + (({col}) % {self.epc}) * {esz})")

    def load_stage(self, stage: str, ktile: str) -> list[str]:
        v, t = self.v, self.t
        T = t.threads
        out = [f"{{ const int at_st = {stage}; const int at_kb = at_k0 + ({ktile}) * {t.block_k};"]
        for op in ("A", "B"):
            rows, rlen = (self.a_rows, self.a_len) if op == "A" else (self.b_rows, self.b_len)
            cpr = rlen // self.epc
            chunks = rows * cpr
            size = self.a_tile if op == "A" else self.b_tile
            lay = v.a_layout if op == "A" else v.b_layout
            # (row coordinate, column coordinate) names in the product's terms
            if op == "A":
                rc, cc = ("at_gm", "at_gk") if lay == "mk" else ("at_gk", "at_gm")
                rbase, cbase = ("at_bm", "at_kb") if lay == "mk" else ("at_kb", "at_bm")
                rowlen_g = v.k if lay == "mk" else v.m
            else:
                rc, cc = ("at_gk", "at_gn") if lay == "kn" else ("at_gn", "at_gk")
                rbase, cbase = ("at_kb", "at_bn") if lay == "kn" else ("at_bn", "at_kb")
                rowlen_g = v.n if lay == "kn" else v.k
            other = "at_gm" if op == "A" else "at_gn"
            lim = v.m if op == "A" else v.n
            expr = v.a_expr if op == "A" else v.b_expr
            if expr is not None:  # gathered: one element a thread, rows of m (n), k contiguous
                fast = v.a_rows_fastest if op == "A" else v.b_rows_fastest
                rc_ = (f"at_e % {rows}, at_cl = at_e / {rows}" if fast else
                       f"at_e / {rlen}, at_cl = at_e % {rlen}")
                out += [
                    f"  for (int at_i = 0; at_i < {math.ceil(rows * rlen / T)}; ++at_i) {{",
                    f"    const int at_e = at_i * {T} + at_t;",
                    f"    if (at_e < {rows * rlen}) {{",
                    f"      const int at_r = {rc_};",
                    f"      const int {other} = {'at_bm' if op == 'A' else 'at_bn'} + at_r, at_gk = at_kb + at_cl;",
                    f"      const float at_v = (at_gk < at_k1 && {other} < {lim}) ? ({expr}) : 0.0f;",
                    f"      *(AT_STORE_T*){self.addr(f'at_s{op} + at_st * {size}', 'at_r', 'at_cl', rlen)} = AT_FROM_FLOAT(at_v);",
                    "    }",
                    "  }",
                ]
                continue
            its = math.ceil(chunks / T)
            out += [
                f"  for (int at_i = 0; at_i < {its}; ++at_i) {{",
                f"    const int at_c = at_i * {T} + at_t;",
                f"    if (at_c < {chunks}) {{",
                f"      const int at_r = at_c / {cpr}, at_ch = at_c % {cpr};",
                f"      const int {rc} = {rbase} + at_r, {cc} = {cbase} + at_ch * {self.epc};",
                f"      const int at_ok = at_gk < at_k1 && {other} < {lim};",
                f"      const unsigned char* at_src = at_{op} + ((size_t){rc} * {rowlen_g} + {cc}) * {v.esz};",
                f"      AT_CP_ASYNC16(at_s{op} + at_st * {size} + at_r * {rlen * v.esz} + "
                f"{self.swz('at_ch', 'at_r', rlen)} * 16, at_ok ? at_src : at_{op}, at_ok ? 16 : 0);",
                "    }",
                "  }",
            ]
        return out + ["}"]

    def fragments(self) -> list[str]:
        v, t = self.v, self.t
        mi, ni = t.warp_m // 16, t.warp_n // 8
        out = [f"uint32_t at_fa[{mi}][4], at_fb[{ni}][2];"]
        if v.dtype == "float32":
            def a_el(m: str, k: str) -> str:
                r, c = (m, k) if v.a_layout == "mk" else (k, m)
                return f"AT_TF32(*(const float*){self.addr('at_cA', r, c, self.a_len)})"

            def b_el(k: str, n: str) -> str:
                r, c = (k, n) if v.b_layout == "kn" else (n, k)
                return f"AT_TF32(*(const float*){self.addr('at_cB', r, c, self.b_len)})"

            for i in range(mi):
                m0 = f"at_wm * {t.warp_m} + {i * 16} + at_g"
                for j, (dm, dk) in enumerate([(0, 0), (8, 0), (0, 4), (8, 4)]):
                    out.append(f"at_fa[{i}][{j}] = {a_el(f'{m0} + {dm}', f'at_kk + at_q + {dk}')};")
            for j in range(ni):
                n0 = f"at_wn * {t.warp_n} + {j * 8} + at_g"
                for r, dk in enumerate((0, 4)):
                    out.append(f"at_fb[{j}][{r}] = {b_el(f'at_kk + at_q + {dk}', n0)};")
            return out
        for i in range(mi):
            m0 = f"at_wm * {t.warp_m} + {i * 16}"
            if v.a_layout == "mk":  # rows m, non-transposed: matrix q = (m half q&1, k half q>>1)
                r, c, ld = f"{m0} + (at_lane & 7) + ((at_lane >> 3) & 1) * 8", "at_kk + (at_lane >> 4) * 8", ""
            else:  # rows k, transposed: matrix q = (m half q&1, k half q>>1)
                r, c, ld = "at_kk + (at_lane & 7) + (at_lane >> 4) * 8", f"{m0} + ((at_lane >> 3) & 1) * 8", "_T"
            out.append(f"AT_LDMATRIX_X4{ld}(at_fa[{i}], {self.addr('at_cA', r, c, self.a_len)});")
        for j in range(ni // 2):
            n0 = f"at_wn * {t.warp_n} + {j * 16}"
            if v.b_layout == "nk":  # rows n: matrix q = (k half q&1, n half q>>1)
                r, c, ld = f"{n0} + (at_lane & 7) + (at_lane >> 4) * 8", "at_kk + ((at_lane >> 3) & 1) * 8", ""
            else:  # rows k, transposed
                r, c, ld = "at_kk + (at_lane & 7) + ((at_lane >> 3) & 1) * 8", f"{n0} + (at_lane >> 4) * 8", "_T"
            out += [
                "{ uint32_t at_x[4];",
                f"  AT_LDMATRIX_X4{ld}(at_x, {self.addr('at_cB', r, c, self.b_len)});",
                f"  at_fb[{2 * j}][0] = at_x[0]; at_fb[{2 * j}][1] = at_x[1];"
                f" at_fb[{2 * j + 1}][0] = at_x[2]; at_fb[{2 * j + 1}][1] = at_x[3]; }}",
            ]
        return out

    def lines(self, out_name: str) -> list[str]:
        v, t = self.v, self.t
        mi, ni = t.warp_m // 16, t.warp_n // 8
        wn = t.block_n // t.warp_n
        a_bs = v.m * v.k * v.esz if v.a_batched else 0
        b_bs = v.k * v.n * v.esz if v.b_batched else 0
        body = [
            "const int at_t = AT_TID, at_lane = at_t & 31, at_warp = at_t >> 5;",
            "const int at_g = at_lane >> 2, at_q = at_lane & 3;",
            f"const int at_wm = at_warp / {wn}, at_wn = at_warp % {wn};",
            f"const int at_bm = AT_BY * {t.block_m}, at_bn = AT_BX * {t.block_n};",
            f"const int at_z = AT_BZ, at_b = at_z / {t.split_k}, at_part = at_z % {t.split_k};",
            f"const int at_k0 = at_part * {self.kps};",
            f"const int at_k1 = at_k0 + {self.kps} < {v.k} ? at_k0 + {self.kps} : {v.k};",
            f"const int at_kt = at_k1 > at_k0 ? (at_k1 - at_k0 + {t.block_k - 1}) / {t.block_k} : 0;",
            *([] if v.a_expr else [f"const unsigned char* at_A = (const unsigned char*)in{v.a_arg} + (size_t)at_b * {a_bs};"]),
            *([] if v.b_expr else [f"const unsigned char* at_B = (const unsigned char*)in{1 - v.a_arg} + (size_t)at_b * {b_bs};"]),
            f"unsigned char* at_sA = at_smem; unsigned char* at_sB = at_smem + {t.stages * self.a_tile};",
            f"float at_acc[{mi}][{ni}][4];",
            f"for (int i = 0; i < {mi}; ++i) for (int j = 0; j < {ni}; ++j) for (int c = 0; c < 4; ++c)"
            " at_acc[i][j][c] = 0.0f;",
            f"for (int at_first = 0; at_first < {t.stages - 1}; ++at_first) {{",
            "  if (at_first < at_kt)",
            *["  " + x for x in self.load_stage("at_first", "at_first")],
            "  AT_CP_COMMIT();",
            "}",
            "for (int at_it = 0; at_it < at_kt; ++at_it) {",
            f"  AT_CP_WAIT({t.stages - 2});",
            "  AT_SYNC();",
            f"  {{ const int at_nx = at_it + {t.stages - 1};",
            "    if (at_nx < at_kt)",
            *["    " + x for x in self.load_stage(f"at_nx % {t.stages}", "at_nx")],
            "    AT_CP_COMMIT(); }",
            f"  const unsigned char* at_cA = at_sA + (at_it % {t.stages}) * {self.a_tile};",
            f"  const unsigned char* at_cB = at_sB + (at_it % {t.stages}) * {self.b_tile};",
            "  AT_UNROLL",
            f"  for (int at_kk = 0; at_kk < {t.block_k}; at_kk += {v.kstep}) {{",
            *["    " + x for x in self.fragments()],
            f"    for (int i = 0; i < {mi}; ++i) for (int j = 0; j < {ni}; ++j) AT_MMA(at_acc[i][j], at_fa[i], at_fb[j]);",
            "  }",
            "}",
            "AT_CP_WAIT(0);",
        ]
        plain = f"(size_t)at_b * {v.m * v.n} + (size_t)at_row * {v.n} + at_col"
        if t.split_k > 1:
            dst, off = "at_ws", f"(size_t)at_z * {v.m * v.n} + (size_t)at_row * {v.n} + at_col"
        else:
            dst, off = out_name, v.c_offset or plain
        body += [
            f"for (int i = 0; i < {mi}; ++i) for (int j = 0; j < {ni}; ++j) for (int c = 0; c < 4; ++c) {{",
            f"  const int at_row = at_bm + at_wm * {t.warp_m} + i * 16 + at_g + (c >> 1) * 8;",
            f"  const int at_col = at_bn + at_wn * {t.warp_n} + j * 8 + at_q * 2 + (c & 1);",
            f"  if (at_row < {v.m} && at_col < {v.n}) {{ const float at_v = at_acc[i][j][c]; "
            f"{dst}[{off}] = {v.epilogue if v.epilogue and t.split_k == 1 else 'at_v'}; }}",
            "}",
        ]
        return body


def launch_shape(view: GemmView, tile: TensorCoreTile) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of the main kernel."""
    grid = (math.ceil(view.n / tile.block_n), math.ceil(view.m / tile.block_m), view.batch * tile.split_k)
    return grid, (tile.threads, 1, 1)


_CTYPE = {"float16": "at_half", "bfloat16": "at_bf16", "float32": "float"}
_PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}

_CUDA_PRIMS = CUDA_CP_ASYNC + r"""#ifndef AT_TENSOR_CORE_PRIMS
#define AT_TENSOR_CORE_PRIMS
#include <stdint.h>
#define AT_TID threadIdx.x
#define AT_BX blockIdx.x
#define AT_BY blockIdx.y
#define AT_BZ blockIdx.z
#define AT_SYNC() __syncthreads()
#define AT_UNROLL _Pragma("unroll")
#define AT_LDMATRIX_X4(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) : "r"(at_saddr(p)))
#define AT_LDMATRIX_X4_T(r, p) asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3]) : "r"(at_saddr(p)))
__device__ __forceinline__ uint32_t at_tf32(float x) { uint32_t u; asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x)); return u; }
#define AT_TF32(x) at_tf32(x)
#endif
"""

# per kernel (a module holds kernels of several precisions): redefined, so undefined first
_CUDA_MMA = {
    16: r"""#undef AT_MMA
#define AT_MMA(d, a, b) asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\n" : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
""",
    8: r"""#undef AT_MMA
#define AT_MMA(d, a, b) asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\n" : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"((b)[0]), "r"((b)[1]))
""",
}


def _store_sum(view: GemmView) -> str:
    """The split-K sum ``at_v`` of element ``at_e`` of batch ``at_b`` stored to the output (through
    the epilogue)."""
    off = view.c_offset or f"(size_t)at_b * {view.m * view.n} + at_e"
    return (f"{{ const int at_row = at_e / {view.n}, at_col = at_e % {view.n}; (void)at_row; (void)at_col; "
            f"C[{off}] = {view.epilogue or 'at_v'}; }}")


def _params(view: GemmView) -> str:
    """The kernel's input parameters ``in0, in1, ...`` in their storage types."""
    return ", ".join(f"const {_CTYPE[d]}* __restrict__ in{i}" for i, d in enumerate(view.inputs))


def _conversions(view: GemmView, backend: str) -> str:
    """AT_STORE_T / AT_FROM_FLOAT / AT_TO_FLOAT: the operands' storage type and its conversions."""
    undef = "#undef AT_STORE_T\n#undef AT_FROM_FLOAT\n#undef AT_TO_FLOAT\n"
    if view.dtype == "float32":
        return undef + "#define AT_STORE_T float\n#define AT_FROM_FLOAT(x) (x)\n#define AT_TO_FLOAT(x) (x)\n"
    return (f"{undef}#define AT_STORE_T {_CTYPE[view.dtype]}\n"
            f"#define AT_FROM_FLOAT(x) {from_float(backend, view.dtype, 'x')}\n"
            f"#define AT_TO_FLOAT(x) {to_float(backend, view.dtype, 'x')}\n")


def splitk_name(name: str) -> str:
    return f"{name}_splitk"


def render_cuda(view: GemmView, tile: TensorCoreTile, name: str) -> str:
    """The CUDA source: the tensor-core kernel ``name(inputs.., C[, workspace])`` and, with
    split-K, ``name_splitk(workspace, inputs.., C)`` summing the parts (and applying the epilogue)."""
    body = _Body(view, tile)
    head = (CUDA_PRELUDE + _CUDA_PRIMS + _CUDA_MMA[view.kstep].format(t=_PTX_TYPE.get(view.dtype, ""))
            + _conversions(view, "cuda"))
    params = f"{_params(view)}, float* __restrict__ C"
    if tile.split_k > 1:
        params += ", float* __restrict__ at_ws"
    lines = [
        head,
        f'extern "C" __global__ void __launch_bounds__({tile.threads}) {name}({params}) {{',
        "  extern __shared__ __align__(128) unsigned char at_smem[];",
    ]
    lines += ["  " + x for x in body.lines("C")]
    lines.append("}")
    if tile.split_k > 1:
        total = view.batch * view.m * view.n
        lines += [
            f'extern "C" __global__ void __launch_bounds__(256) {splitk_name(name)}('
            f"const float* __restrict__ at_ws, {_params(view)}, float* __restrict__ C) {{",
            "  const int at_i = blockIdx.x * 256 + threadIdx.x;",
            f"  if (at_i >= {total}) return;",
            f"  const int at_b = at_i / {view.m * view.n}, at_e = at_i % {view.m * view.n};",
            "  float at_v = 0.0f;",
            f"  for (int p = 0; p < {tile.split_k}; ++p) at_v += at_ws[((size_t)at_b * {tile.split_k} + p) * "
            f"{view.m * view.n} + at_e];",
            f"  {_store_sum(view)}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def _emulation_prims(view: GemmView, tile: TensorCoreTile) -> str:
    T = tile.threads
    if view.dtype == "float32":
        elem = "static inline float at_el(uint32_t r, int hi) { (void)hi; uint32_t u = r & 0xffffe000u; float f; memcpy(&f, &u, 4); return f; }"
        a_at = "xm[base + (row & 7) * 4 + (kk & 3)][(row >> 3) + 2 * (kk >> 2)], 0"
        b_at = "xm[base + col * 4 + (kk & 3)][4 + (kk >> 2)], 0"
    else:
        conv = "float f = (float)*(const at_half*)&h;" if view.dtype == "float16" else "float f = at_bf2f(h);"
        elem = (f"static inline float at_el(uint32_t r, int hi) {{ uint16_t h = (uint16_t)(hi ? r >> 16 : r & 0xffffu); "
                f"{conv} return f; }}")
        a_at = "xm[base + (row & 7) * 4 + ((kk & 7) >> 1)][(row >> 3) + 2 * (kk >> 3)], kk & 1"
        b_at = "xm[base + col * 4 + ((kk & 7) >> 1)][4 + (kk >> 3)], kk & 1"
    return f"""#include <omp.h>
#include <stdlib.h>
{elem}
/* ldmatrix .x4 (trans: of the transposed 8x8 matrices) */
static void at_ldsm(uint32_t* r, const unsigned char* p, int trans, const unsigned char** xp, int tid, int* ph) {{
  const unsigned char** slot = xp + (*ph) * {T};
  slot[tid] = p;
  _Pragma("omp barrier")
  const int base = tid & ~31, lane = tid & 31;
  for (int m = 0; m < 4; ++m) {{
    if (!trans) memcpy(&r[m], slot[base + m * 8 + (lane >> 2)] + (lane & 3) * 4, 4);
    else {{
      uint16_t lo, hi;
      memcpy(&lo, slot[base + m * 8 + 2 * (lane & 3)] + (lane >> 2) * 2, 2);
      memcpy(&hi, slot[base + m * 8 + 2 * (lane & 3) + 1] + (lane >> 2) * 2, 2);
      r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
    }}
  }}
  *ph ^= 1; }}
/* mma.sync m16n8k{view.kstep}: d += a * b over the warp's fragments */
static void at_mma(float* d, const uint32_t* a, const uint32_t* b, uint32_t (*xmall)[8], int tid, int* ph) {{
  uint32_t (*xm)[8] = xmall + (*ph) * {T};
  for (int i = 0; i < 4; ++i) xm[tid][i] = a[i];
  xm[tid][4] = b[0]; xm[tid][5] = b[1];
  _Pragma("omp barrier")
  const int base = tid & ~31, lane = tid & 31, g = lane >> 2, q = lane & 3;
  for (int c = 0; c < 4; ++c) {{
    const int row = g + (c >> 1) * 8, col = q * 2 + (c & 1);
    float s = 0.0f;
    for (int kk = 0; kk < {view.kstep}; ++kk) s += at_el({a_at}) * at_el({b_at});
    d[c] += s;
  }}
  *ph ^= 1; }}
#define AT_TID at_tid
#define AT_BX at_bx
#define AT_BY at_by
#define AT_BZ at_bz
#define AT_SYNC() _Pragma("omp barrier")
#define AT_UNROLL
#define AT_LDMATRIX_X4(r, p) at_ldsm((r), (p), 0, at_xp, at_tid, &at_ph)
#define AT_LDMATRIX_X4_T(r, p) at_ldsm((r), (p), 1, at_xp, at_tid, &at_ph)
#define AT_MMA(d, a, b) at_mma((d), (a), (b), at_xm, at_tid, &at_ph)
static inline uint32_t at_tf32_bits(float x) {{ float r = at_tf32(x); uint32_t u; memcpy(&u, &r, 4); return u; }}
#define AT_TF32(x) at_tf32_bits(x)
"""


def render_emulation(view: GemmView, tile: TensorCoreTile, name: str) -> str:
    """C with ``void name(void** args)`` (args: the inputs, then C): the same kernel body, blocks in turn,
    each an OpenMP team of ``tile.threads`` threads executing the warp instructions per lane."""
    body = _Body(view, tile)
    T = tile.threads
    grid, _ = launch_shape(view, tile)
    smem = shared_bytes(view, tile)
    ins = " ".join(f"const {_CTYPE[d]}* in{i} = (const {_CTYPE[d]}*)args[{i}];" for i, d in enumerate(view.inputs))
    lines = [
        C_PRELUDE + EMULATION_CP_ASYNC + _emulation_prims(view, tile) + _conversions(view, "c")
        + "#include <math.h>\n",
        f"void {name}(void** args) {{",
        f"  {ins} float* C = (float*)args[{len(view.inputs)}];",
        f"  unsigned char* at_smem = (unsigned char*)aligned_alloc(128, {smem + (-smem) % 128});",
        f"  const unsigned char** at_xp = (const unsigned char**)malloc(sizeof(void*) * 2 * {T});",
        f"  uint32_t (*at_xm)[8] = (uint32_t (*)[8])malloc(sizeof(uint32_t) * 16 * {T});",
    ]
    if tile.split_k > 1:
        lines.append(f"  float* at_ws = (float*)malloc(sizeof(float) * {grid[2] * view.m * view.n});")
    lines += [
        f"  for (int at_bz = 0; at_bz < {grid[2]}; ++at_bz)",
        f"  for (int at_by = 0; at_by < {grid[1]}; ++at_by)",
        f"  for (int at_bx = 0; at_bx < {grid[0]}; ++at_bx) {{",
        f"    #pragma omp parallel num_threads({T})",
        "    {",
        "      const int at_tid = omp_get_thread_num();",
        f"      {EMULATION_QUEUE_DECL} int at_ph = 0;",
    ]
    lines += ["      " + x for x in body.lines("C")]
    lines += [f"      {EMULATION_QUEUE_FREE}", "    }", "  }"]
    if tile.split_k > 1:
        mn = view.m * view.n
        lines += [
            f"  for (int at_b = 0; at_b < {view.batch}; ++at_b) for (int at_e = 0; at_e < {mn}; ++at_e) {{",
            "    float at_v = 0.0f;",
            f"    for (int p = 0; p < {tile.split_k}; ++p) at_v += at_ws[((size_t)at_b * {tile.split_k} + p) * {mn} + at_e];",
            f"    {_store_sum(view)}",
            "  }",
            "  free(at_ws);",
        ]
    lines += ["  free(at_smem); free(at_xp); free(at_xm);", "}"]
    return "\n".join(lines) + "\n"
