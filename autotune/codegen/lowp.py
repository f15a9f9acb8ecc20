"""16-bit floats and TF32 in generated C and CUDA: type names, conversions, rounding.

Kernels store float16 / bfloat16 tensors and compute on them as float32 (``te.cast``); TF32 is a
precision mode of float32 matrix products (inputs rounded to 10 mantissa bits, products summed in
float32). The C side (CPU code and the CUDA emulation) rounds exactly like the device:

- float16 is gcc's ``_Float16`` (IEEE binary16; conversion from float rounds to nearest even, as
  ``__float2half_rn``);
- bfloat16 is the upper half of a float's bits in a ``uint16_t``: widening is a shift, narrowing
  rounds to nearest even (``__float2bfloat16_rn``), a NaN stays a quiet NaN;
- TF32 rounding is ``cvt.rna.tf32.f32``: to nearest, ties away from zero, on the 13 low mantissa
  bits; infinities and NaNs pass through.
"""

from __future__ import annotations

C_PRELUDE = """#include <stdint.h>
#include <string.h>
typedef _Float16 at_half;
typedef uint16_t at_bf16;
static inline float at_bf2f(at_bf16 x) {
  uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline at_bf16 at_f2bf(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (at_bf16)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u); return (at_bf16)(u >> 16); }
static inline float at_tf32(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) { u += 0x1000u; u &= 0xffffe000u; }
  memcpy(&f, &u, 4); return f; }
"""

CUDA_PRELUDE = """#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __half at_half;
typedef __nv_bfloat16 at_bf16;
"""

# (backend, dtype) -> (to float32, from float32) as format strings
_CONVERT = {
    ("c", "float16"): ("((float)({x}))", "((at_half)({x}))"),
    ("c", "bfloat16"): ("at_bf2f({x})", "at_f2bf({x})"),
    ("cuda", "float16"): ("__half2float({x})", "__float2half_rn({x})"),
    ("cuda", "bfloat16"): ("__bfloat162float({x})", "__float2bfloat16_rn({x})"),
}


def to_float(backend: str, dtype: str, text: str) -> str:
    """C text widening a 16-bit float to float32 (``backend``: "c" or "cuda")."""
    return _CONVERT[(backend, dtype)][0].format(x=text)


def from_float(backend: str, dtype: str, text: str) -> str:
    """C text rounding a float32 to a 16-bit float (to nearest even)."""
    return _CONVERT[(backend, dtype)][1].format(x=text)


def uses_low_precision(source: str) -> bool:
    """Does rendered code name a 16-bit float type (and so need the prelude)?"""
    return "at_half" in source or "at_bf16" in source
