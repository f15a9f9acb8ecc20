"""The shared C-style renderer: statements and scalar expressions of the loop-nest IR.

Backends subclass it and override only what differs (prelude, qualifiers, loop pragmas, vectors).
"""

from __future__ import annotations

import math

from ..ir.nodes import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Buffer,
    For,
    IfThen,
    Load,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    VLoad,
    VStore,
)
from ..te.expr import (
    FLOAT_DTYPES,
    LOW_PRECISION_DTYPES,
    NARROW_INT_DTYPES,
    SUB_BYTE_DTYPES,
    Binary,
    Call,
    Cast,
    Compare,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Select,
    Var,
    int_range,
)
from .lowp import C_PRELUDE, CUDA_PRELUDE, from_float, to_float, uses_low_precision

DTYPE_BYTES = {
    "float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1, "float16": 2, "bfloat16": 2,
    "int8": 1, "int16": 2, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "int4": 1, "uint4": 1, "int2": 1, "uint2": 1,
}
# bool is one byte, as in numpy, so boolean tensors cross the module boundary unconverted
C_TYPES = {
    "float32": "float", "float64": "double", "int32": "int", "int64": "long long", "bool": "unsigned char",
    # 16-bit floats: typedefs of each backend's prelude (codegen/lowp.py)
    "float16": "at_half", "bfloat16": "at_bf16",
    "int8": "signed char", "int16": "short", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "uint64": "unsigned long long",
    # sub-byte integers: one byte holding the value's low bits (ml_dtypes' layout), see int_cast
    "int4": "unsigned char", "uint4": "unsigned char", "int2": "unsigned char", "uint2": "unsigned char",
}
_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}
# the range of an 8/16-bit type's values C computes in int, unsigned ones in unsigned int (no overflow)
_PROMOTED = {"int8": "int", "int16": "int", "uint8": "unsigned int", "uint16": "unsigned int"}
_INT_OPS = {
    "add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%",
    "bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>",
}
_FLOAT_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_CMP_OPS = {"lt": "<", "le": "<=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}


def math_call(name: str, args: list[str], dtype: str) -> str:
    """C (and CUDA) text of a te math function (``te.expr.Call``) on ``args`` in ``dtype``."""
    suffix = "f" if dtype == "float32" else ""
    one = "1.0f" if dtype == "float32" else "1.0"
    if name == "rsqrt":
        return f"({one} / sqrt{suffix}({args[0]}))"
    if name == "sigmoid":
        return f"({one} / ({one} + exp{suffix}(-({args[0]}))))"
    if name == "ipow":  # int64 ** int64, modulo 2**64 (a GNU statement expression; see te int_power)
        return (
            f"({{ unsigned long long at_b = (unsigned long long)({args[0]}), at_r = 1; "
            f"long long at_e = {args[1]}; "
            "if (at_e < 0) at_r = at_b == 1 ? 1 : at_b == ~0ULL ? ((at_e & 1) ? ~0ULL : 1) : 0; "
            "else for (; at_e; at_e >>= 1) { if (at_e & 1) at_r *= at_b; at_b *= at_b; } "
            "(long long)at_r; })"
        )
    return f"{name}{suffix}({', '.join(args)})"


def int_literal(value: int, dtype: str) -> str:
    """A C integer literal of ``dtype`` (unsigned and 64-bit values suffixed, so C types them so; a
    sub-byte value as the byte that holds it)."""
    if dtype in SUB_BYTE_DTYPES:
        return str(value & ((1 << _SUB_BYTE_BITS[dtype]) - 1))
    if dtype.startswith("uint"):
        return f"{value}U" if dtype != "uint64" else f"{value}ULL"
    if -(2**31) <= value < 2**31:
        return str(value)
    return f"({value + 1}LL - 1)" if value == -(2**63) else f"{value}LL"


def int_cast(src: str, dst: str, text: str) -> str:
    """A conversion involving a sub-byte or narrow integer type (``src`` not a 16-bit float), as
    numpy / ml_dtypes convert: integers wrap (keep the low bits); a float truncates toward zero,
    into an 8/16/32-bit integer through ``long long`` (wraps where that fits), a negative one into
    uint64 through ``long long`` too, into a sub-byte type
    only when the truncated value is in range (else 0, ml_dtypes' rule); a sub-byte value reads as
    its sign- or zero-extended value."""
    if src in SUB_BYTE_DTYPES:
        bits = _SUB_BYTE_BITS[src]
        mask, sign = (1 << bits) - 1, 1 << (bits - 1)
        text = f"((int)(({text}) & {mask}))"
        if not src.startswith("u"):
            text = f"(((int)(({text}) ^ {sign})) - {sign})"  # sign extension
        src = "int32"
        if dst == src:
            return text
    if dst in SUB_BYTE_DTYPES:
        bits = _SUB_BYTE_BITS[dst]
        mask = (1 << bits) - 1
        lo, hi = int_range(dst)
        if src in FLOAT_DTYPES:
            inside = f"({text}) > {lo - 1}.0f && ({text}) < {hi + 1}.0f"
            return f"(({inside}) ? (unsigned char)((int)({text}) & {mask}) : 0)"
        return f"((unsigned char)(({text}) & {mask}))"
    if src in FLOAT_DTYPES and dst == "uint64":  # a negative value wraps, as through int64
        return f"(({text}) < 0 ? (unsigned long long)(long long)({text}) : (unsigned long long)({text}))"
    if src in FLOAT_DTYPES and dst in NARROW_INT_DTYPES:
        return f"(({C_TYPES[dst]})(long long)({text}))"
    return f"(({C_TYPES[dst]})({text}))"


class CStyleRenderer:
    """Renders a PrimFunc as C-family source. Integer division assumes non-negative operands."""

    restrict = "__restrict__"
    indent_unit = "  "

    # --- pieces a backend overrides ---------------------------------------------------------
    def prelude(self) -> str:
        return ""

    def kernel_signature(self, f: PrimFunc) -> str:
        return f"void {f.name}(void** args)"

    def unpack_args(self, f: PrimFunc) -> list[str]:
        return [
            f"{C_TYPES[b.dtype]}* {self.restrict} {b.name} = ({C_TYPES[b.dtype]}*)args[{i}];"
            for i, b in enumerate(f.args)
        ]

    def loop_pragma(self, s: For) -> str | None:
        return None

    def local_decl(self, b: Buffer) -> str:
        return f"{C_TYPES[b.dtype]} {b.name}[{b.size}];"

    def register_decl(self, b: Buffer) -> str:
        """A variable that holds a whole ``register`` buffer (one scalar; vectors: the backend)."""
        if b.size != 1:
            raise NotImplementedError(f"{type(self).__name__} has no vector registers")
        return f"{C_TYPES[b.dtype]} {b.name};"

    def heap_alloc(self, b: Buffer) -> tuple[str, str]:
        t = C_TYPES[b.dtype]
        return (f"{t}* {self.restrict} {b.name} = ({t}*)malloc(sizeof({t}) * {b.size});", f"free({b.name});")

    def vector_expr(self, e: Expr) -> str:
        raise NotImplementedError(f"{type(self).__name__} renders no vector {type(e).__name__}")

    def vector_store(self, s: VStore) -> str:
        raise NotImplementedError(f"{type(self).__name__} renders no vector stores")

    # --- functions and statements --------------------------------------------------------------
    def render(self, f: PrimFunc) -> str:
        lines = [self.kernel_signature(f) + " {"]
        lines += [self.indent_unit + line for line in self.unpack_args(f)]
        lines += self.stmt(f.body, 1)
        lines.append("}")
        return self.with_prelude("\n".join(lines) + "\n")

    def with_prelude(self, code: str) -> str:
        """The backend's prelude, with the 16-bit float types when ``code`` uses them, then ``code``."""
        lowp = ""
        if uses_low_precision(code):
            lowp = CUDA_PRELUDE if self.lowp_backend == "cuda" else C_PRELUDE
        return self.prelude() + "\n" + lowp + code

    def stmt(self, s: Stmt, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        if isinstance(s, Seq):
            return [line for c in s.stmts for line in self.stmt(c, depth)]
        if isinstance(s, For):
            v = s.var.name
            head = [pad + p for p in [self.loop_pragma(s)] if p]
            head.append(f"{pad}for (int {v} = 0; {v} < {s.extent}; ++{v}) {{")
            return head + self.stmt(s.body, depth + 1) + [pad + "}"]
        if isinstance(s, IfThen):
            return [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmt(s.body, depth + 1) + [pad + "}"]
        if isinstance(s, Allocate):
            if s.buffer.scope == "register":  # a variable of the enclosing block
                return [pad + self.register_decl(s.buffer)] + self.stmt(s.body, depth)
            if s.buffer.scope == "local":
                return (
                    [pad + "{", pad + self.indent_unit + self.local_decl(s.buffer)]
                    + self.stmt(s.body, depth + 1)
                    + [pad + "}"]
                )
            alloc, release = self.heap_alloc(s.buffer)
            return (
                [pad + "{", pad + self.indent_unit + alloc]
                + self.stmt(s.body, depth + 1)
                + [
                    pad + self.indent_unit + release,
                    pad + "}",
                ]
            )
        if isinstance(s, (Store, VStore)) and s.buffer.scope == "register":
            return [f"{pad}{s.buffer.name} = {self.expr(s.value)};"]
        if isinstance(s, Store):
            return [f"{pad}{s.buffer.name}[{self.expr(s.index)}] = {self.expr(s.value)};"]
        if isinstance(s, VStore):
            return [pad + self.vector_store(s)]
        if isinstance(s, Prefetch):
            return [pad + self.prefetch(s)]
        if isinstance(s, AsyncCopy):  # the AT_CP_* macros of codegen.cp_async
            size = 4 * s.lanes
            got = str(size) if s.valid is None else f"({self.expr(s.valid)}) ? {size} : 0"
            return [f"{pad}AT_CP_ASYNC{size}({s.dst.name} + {self.expr(s.dst_index)}, "
                    f"{s.src.name} + {self.expr(s.src_index)}, {got});"]
        if isinstance(s, AsyncCommit):
            return [f"{pad}AT_CP_COMMIT();"]
        if isinstance(s, AsyncWait):
            return [f"{pad}AT_CP_WAIT({s.pending});"]
        raise TypeError(f"cannot render {type(s).__name__}")

    def cast(self, src: str, dst: str, text: str) -> str:
        """A conversion; 16-bit floats convert through float32 with the backend's helpers; integers
        as numpy converts them (see :func:`int_cast`)."""
        if src in SUB_BYTE_DTYPES or dst in SUB_BYTE_DTYPES or dst in NARROW_INT_DTYPES:
            if src in LOW_PRECISION_DTYPES:
                text, src = to_float(self.lowp_backend, src, text), "float32"
            return int_cast(src, dst, text)
        if src in LOW_PRECISION_DTYPES:
            text, src = to_float(self.lowp_backend, src, text), "float32"
            if dst == src:
                return text
        if dst in LOW_PRECISION_DTYPES:
            return from_float(self.lowp_backend, dst, text if src == "float32" else f"((float){text})")
        return f"(({C_TYPES[dst]}){text})"

    lowp_backend = "c"  # how 16-bit floats convert (codegen/lowp.py)

    def prefetch(self, s: Prefetch) -> str:
        raise TypeError(f"{type(self).__name__} has no cache prefetch")

    # --- expressions ------------------------------------------------------------------------------
    def float_literal(self, value: float, dtype: str) -> str:
        if math.isinf(value):
            return "INFINITY" if value > 0 else "-INFINITY"
        text = repr(float(value))
        return text + "f" if dtype == "float32" else text

    def call(self, name: str, args: list[str], dtype: str) -> str:
        return math_call(name, args, dtype)

    def bound_loop(self, s: For, depth: int, index: str, launched: int) -> list[str]:
        """A loop bound to a hardware index (``blockIdx``/``threadIdx``, or an emulation's thread
        number): ``int var = index;``, guarded when it runs fewer iterations than ``launched``."""
        pad = self.indent_unit * depth
        v = s.var.name
        head = [f"{pad}{{", f"{pad}  int {v} = {index};"]
        if s.extent < launched:
            return (
                head
                + [f"{pad}  if ({v} < {s.extent}) {{"]
                + self.stmt(s.body, depth + 2)
                + [f"{pad}  }}", f"{pad}}}"]
            )
        return head + self.stmt(s.body, depth + 1) + [f"{pad}}}"]

    def expr(self, e: Expr) -> str:
        if isinstance(e, IntImm):
            return int_literal(e.value, e.dtype)
        if isinstance(e, FloatImm):
            return self.float_literal(e.value, e.dtype)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, (Load, VLoad)) and e.buffer.scope == "register":
            return e.buffer.name
        if isinstance(e, Load):
            return f"{e.buffer.name}[{self.expr(e.index)}]"
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.dtype in FLOAT_DTYPES:
                if e.op in _FLOAT_OPS:
                    return f"({a} {_FLOAT_OPS[e.op]} {b})"
                fn = {"max": "fmax", "min": "fmin", "pow": "pow"}[e.op]
                return self.call(fn, [a, b], e.dtype)
            if e.op == "shl":  # in unsigned arithmetic: bits shifted past the top are discarded
                return f"(({C_TYPES[e.dtype]})((unsigned long long)({a}) << ({b})))"
            if e.op in _INT_OPS:
                if e.dtype in _PROMOTED:  # computed in int / unsigned int, wrapped back to the type
                    w = _PROMOTED[e.dtype]
                    return f"(({C_TYPES[e.dtype]})(({w})({a}) {_INT_OPS[e.op]} ({w})({b})))"
                return f"({a} {_INT_OPS[e.op]} {b})"
            return f"(({a}) {'>' if e.op == 'max' else '<'} ({b}) ? ({a}) : ({b}))"
        if isinstance(e, Compare):
            return f"({self.expr(e.a)} {_CMP_OPS[e.op]} {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Call):
            return self.call(e.name, [self.expr(a) for a in e.args], e.dtype)
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, Cast):
            return self.cast(e.value.dtype, e.dtype, self.expr(e.value))
        return self.vector_expr(e)
