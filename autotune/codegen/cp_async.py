"""``cp.async``: asynchronous global->shared copies in commit groups, as CUDA and as its emulation.

Macros used by every kernel that pipelines shared-memory tiles (tensor-core GEMMs and lowered IR):

- ``AT_CP_ASYNC4(dst, src, n)`` / ``AT_CP_ASYNC16(dst, src, n)``: copy 4 / 16 bytes, reading ``n``
  of them (``n`` is the full size or 0) and zero-filling the rest;
- ``AT_CP_COMMIT()``: the copies started since the last commit form a group;
- ``AT_CP_WAIT(n)``: wait until at most ``n`` groups are still in flight.

On CUDA they are PTX (``cp.async.ca`` for 4 bytes, ``cp.async.cg`` for 16). In the emulation each
thread queues its copies and performs them only when a wait retires their group, so a kernel that
reads a tile before waiting for it computes wrong numbers there as it would on a GPU.
"""

from __future__ import annotations

CUDA_CP_ASYNC = r"""#ifndef AT_CP_ASYNC_PRIMS
#define AT_CP_ASYNC_PRIMS
__device__ __forceinline__ unsigned at_saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
#define AT_CP_ASYNC4(dst, src, n) asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(at_saddr(dst)), "l"(src), "r"(n))
#define AT_CP_ASYNC16(dst, src, n) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(at_saddr(dst)), "l"(src), "r"(n))
#define AT_CP_COMMIT() asm volatile("cp.async.commit_group;\n" ::)
#define AT_CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";\n" ::)
#endif
"""

EMULATION_CP_ASYNC = r"""#ifndef AT_CP_ASYNC_PRIMS
#define AT_CP_ASYNC_PRIMS
#include <stdlib.h>
#include <string.h>
typedef struct { unsigned char* d; const unsigned char* s; int n, size, g; } at_cp_t;
/* one thread's copies in flight and the number of groups it has committed */
typedef struct { at_cp_t* q; int n, cap, g; } at_cpq_t;
static inline void at_cp_issue(at_cpq_t* q, void* d, const void* s, int size, int n) {
  if (q->n == q->cap) {
    q->cap = q->cap ? 2 * q->cap : 64;
    q->q = (at_cp_t*)realloc(q->q, sizeof(at_cp_t) * q->cap);
    if (!q->q) abort();
  }
  at_cp_t* c = &q->q[q->n++];
  c->d = (unsigned char*)d; c->s = (const unsigned char*)s; c->n = n; c->size = size; c->g = q->g; }
static inline void at_cp_wait(at_cpq_t* q, int pending) {
  int j = 0;
  for (int i = 0; i < q->n; ++i) {
    at_cp_t* c = &q->q[i];
    if (c->g < q->g - pending) { memcpy(c->d, c->s, c->n); memset(c->d + c->n, 0, c->size - c->n); }
    else q->q[j++] = *c;
  }
  q->n = j; }
#define AT_CP_ASYNC4(dst, src, n) at_cp_issue(&at_cpq, (dst), (src), 4, (n))
#define AT_CP_ASYNC16(dst, src, n) at_cp_issue(&at_cpq, (dst), (src), 16, (n))
#define AT_CP_COMMIT() (++at_cpq.g)
#define AT_CP_WAIT(n) at_cp_wait(&at_cpq, (n))
#endif
"""

# per emulated thread: its queue, declared at the start of the thread's code and freed at its end
EMULATION_QUEUE_DECL = "at_cpq_t at_cpq = {0, 0, 0, 0};"
EMULATION_QUEUE_FREE = "free(at_cpq.q);"
