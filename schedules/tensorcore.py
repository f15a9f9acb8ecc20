"""Tensor-core space for matrix products in float16 / bfloat16 / TF32 on CUDA.

One sketch: the product is one ``TensorizeStep`` (``codegen.tensorcore``), whose knobs are the
block tile (m, n, k), the warp tile (m, n), the cp.async pipeline depth, the shared-tile swizzle
and split-K. Constraints keep the device's limits: threads per block, dynamic shared memory up to
the device's opt-in limit (``max_shared_per_block_optin`` of the target), accumulator registers
per thread; split-K only where the output tiles leave multiprocessors idle.
"""

from __future__ import annotations

import math
from typing import Iterator

from autotune.codegen.tensorcore import GemmView, TensorCoreTile, tile_problem
from autotune.schedule import Step, TensorizeStep
from autotune.schedule.tensorize import product_view

from .space import ChoiceKnob, Config, SearchSpace

# fp32 accumulators a thread may hold (warp tile / 32) before registers spill
MAX_ACCUMULATORS = 128


def tensor_core_view(workload) -> GemmView | None:  # noqa: ANN001 - Workload
    """The workload's product as tensor cores see it, or None when it has none."""
    return product_view(workload)


class TensorCoreSketch:
    """Configs -> one TensorizeStep; knobs and the device's constraints."""

    def __init__(self, workload, target, view: GemmView) -> None:  # noqa: ANN001
        self.workload, self.target, self.view = workload, target, view
        fp = target.fingerprint
        self.max_threads = int(fp.get("max_threads_per_block", 1024))
        self.max_shared = int(fp.get("max_shared_per_block_optin", fp.get("max_shared_per_block", 49152)))
        self.sms = int(fp.get("multiprocessors", 1))

    def tile(self, c: Config) -> TensorCoreTile:
        return TensorCoreTile(c["block_m"], c["block_n"], c["block_k"], c["warp_m"], c["warp_n"],
                              c["stages"], c["swizzle"], c["split_k"])

    def _blocks(self, c: Config) -> int:
        v = self.view
        return math.ceil(v.m / c["block_m"]) * math.ceil(v.n / c["block_n"]) * v.batch

    def space(self) -> SearchSpace:
        v = self.view
        ks = (16, 32) if v.dtype == "float32" else (16, 32, 64)
        knobs = [
            ChoiceKnob("block_m", (32, 64, 128, 256)),
            ChoiceKnob("block_n", (32, 64, 128, 256)),
            ChoiceKnob("block_k", ks),
            ChoiceKnob("warp_m", (16, 32, 64)),
            ChoiceKnob("warp_n", (16, 32, 64)),
            ChoiceKnob("stages", (2, 3, 4)),
            ChoiceKnob("swizzle", (0, 1)),
            ChoiceKnob("split_k", (1, 2, 4, 8)),
        ]
        constraints = [
            ("tile", lambda c: tile_problem(v, self.tile(c), self.max_shared, self.max_threads) is None),
            ("registers", lambda c: c["warp_m"] * c["warp_n"] // 32 <= MAX_ACCUMULATORS),
            # no tile wider than the matrix rounded up to the instruction
            ("extent", lambda c: c["block_m"] <= max(32, _pow2(v.m)) and c["block_n"] <= max(32, _pow2(v.n))),
            # split K only where the output tiles leave multiprocessors idle
            ("split_k", lambda c: c["split_k"] == 1 or self._blocks(c) * c["split_k"] <= 2 * self.sms),
        ]
        kind = {"float16": "fp16", "bfloat16": "bf16", "float32": "tf32"}[v.dtype]
        return SearchSpace(f"cuda/tensorcore-{kind}/{self.workload.name}", knobs, self.steps, constraints,
                           rules=self._defaults)

    def steps(self, c: Config) -> list[Step]:
        t = self.tile(c)
        return [TensorizeStep(self.workload.outputs[0].name, t.block_m, t.block_n, t.block_k, t.warp_m,
                              t.warp_n, t.stages, t.swizzle, t.split_k)]

    def _defaults(self, space: SearchSpace) -> Iterator[Config]:
        """Large tiles first (128x128, 64x64 warps, 3 stages), shrinking for small products."""
        for bm, bn, wm, wn in ((128, 128, 64, 64), (128, 64, 64, 32), (64, 64, 32, 32), (32, 32, 16, 16)):
            for stages, bk in ((3, 32), (2, 32), (2, 16)):
                yield {"block_m": bm, "block_n": bn, "block_k": bk, "warp_m": wm, "warp_n": wn,
                       "stages": stages, "swizzle": 1, "split_k": 1}


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tensor_core_space(workload, target) -> SearchSpace | None:  # noqa: ANN001 - Workload, Target
    """The tensor-core space of a product in float16/bfloat16/TF32, or None."""
    view = tensor_core_view(workload)
    return None if view is None else TensorCoreSketch(workload, target, view).space()
