"""C timing harness appended to every generated kernel source."""

from __future__ import annotations

import re

TIMER_SYMBOL = "autotune_time"
COLD_TIMER_SYMBOL = "autotune_time_cold"

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Identifiers are prefixed so that macros in the kernel source (e.g. `#define N`)
# cannot collide with them. Only <time.h> is included: glibc headers use reserved
# names, and INT_MAX comes from the compiler builtin instead of <limits.h>.
_TEMPLATE = r"""
/* ---- autotune timing harness ---- */
#include <time.h>

void @KERNEL@(void** args);

static double autotune_now_s(void) {
    struct timespec autotune_ts;
    clock_gettime(CLOCK_MONOTONIC, &autotune_ts);
    return (double)autotune_ts.tv_sec + (double)autotune_ts.tv_nsec * 1e-9;
}

int autotune_time(void** args, int number, int repeat, double min_repeat_ms,
                  double* costs_out) {
    const long long autotune_cap = (long long)__INT_MAX__ / 2;
    const double autotune_min_s = min_repeat_ms * 1e-3;
    int autotune_r = 0;
    if (number < 1) number = 1;
    /* warm-up: page faults, OpenMP pool start-up, cold caches */
    @KERNEL@(args);
    while (autotune_r < repeat) {
        double autotune_t0 = autotune_now_s();
        for (int autotune_i = 0; autotune_i < number; ++autotune_i) {
            @KERNEL@(args);
            /* stop gcc from merging or hoisting identical calls after inlining */
            __asm__ __volatile__("" ::: "memory");
        }
        double autotune_el = autotune_now_s() - autotune_t0;
        if (autotune_el < autotune_min_s && number < autotune_cap) {
            /* aim 10% past the target so the redo almost always qualifies;
               cap the step in case the measurement was mostly noise */
            double autotune_scale = autotune_el > 0.0
                ? 1.1 * autotune_min_s / autotune_el : 1000.0;
            if (autotune_scale > 1000.0) autotune_scale = 1000.0;
            long long autotune_next = (long long)((double)number * autotune_scale) + 1;
            if (autotune_next <= number) autotune_next = (long long)number + 1;
            if (autotune_next > autotune_cap) autotune_next = autotune_cap;
            number = (int)autotune_next;
            continue; /* redo this repeat with the larger number */
        }
        costs_out[autotune_r++] = autotune_el / (double)number;
    }
    return number;
}

/* One timed call per repeat, each after flushing the given buffers from every cache level
   (flush_bytes[i] > 0: args[i] spans that many bytes): how a kernel runs inside a model, where
   its weights were last touched a whole model run ago. */
int autotune_time_cold(void** args, const long long* flush_bytes, int nargs, int repeat,
                       double* costs_out) {
    @KERNEL@(args); /* warm-up: page faults, OpenMP pool start-up */
    for (int autotune_r = 0; autotune_r < repeat; ++autotune_r) {
#if defined(__x86_64__) || defined(__i386__)
        for (int autotune_a = 0; autotune_a < nargs; ++autotune_a) {
            const char* autotune_p = (const char*)args[autotune_a];
            for (long long autotune_o = 0; autotune_o < flush_bytes[autotune_a]; autotune_o += 64)
                __builtin_ia32_clflush(autotune_p + autotune_o);
        }
        __builtin_ia32_mfence();
#endif
        double autotune_t0 = autotune_now_s();
        @KERNEL@(args);
        costs_out[autotune_r] = autotune_now_s() - autotune_t0;
    }
    return 1;
}
"""


def is_c_identifier(name: str) -> bool:
    """True if `name` is a valid C identifier."""
    return bool(_IDENT.match(name))


def harness_source(kernel_name: str) -> str:
    """Return the harness C text that times `kernel_name` via `autotune_time`."""
    if not is_c_identifier(kernel_name):
        raise ValueError(f"not a C identifier: {kernel_name!r}")
    return _TEMPLATE.replace("@KERNEL@", kernel_name)


def full_source(kernel_name: str, source: str) -> str:
    """Kernel source with the harness appended (what actually gets compiled)."""
    return source.rstrip() + "\n" + harness_source(kernel_name)
