"""Graph passes. Each takes a Graph and returns a new one (the input is never modified):

- ``infer_types``        shape/dtype inference; folds constant subexpressions when asked
- ``fold_constants``     evaluate every node whose inputs are all constants
- ``eliminate_dead_code`` drop nodes and constants no graph output depends on
- ``fold_batch_norm``    Conv -> BatchNormalization becomes one Conv with scaled weights and a bias
- ``lower_batch_norm``   any other BatchNormalization becomes Mul + Add with per-channel constants
- ``lower_conv3d``       a 3-d Conv -> one 2-d Conv over depth-stacked channels (output depths in the batch)
- ``canonicalize_gemm``  Gemm -> MatMul (+ Mul alpha) (+ Add bias), constant weights pre-transposed
- ``fuse_gelu``          the erf form x * 0.5 * (1 + erf(x / sqrt 2)) (and its variants) -> Gelu
- ``remove_identities``  Identity / Dropout disappear
- ``lower_one_hot``      OneHot -> Equal of the (wrapped) index with the positions, then Where
- ``lower_lrn``          LRN -> its channel window's sum of squares as a 1x1 convolution, then elementwise
- ``lower_losses``       NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss -> the operators they are made of
- ``lower_quantize``     Quantize/DequantizeLinear, MatMulInteger, QLinearMatMul -> the operators of each
- ``lower_recurrent``    RNN / GRU / LSTM -> their steps unrolled over the static sequence
- ``split_whole_reductions`` ReduceMax / ReduceMin of a whole large tensor -> per row, then over the rows
- ``castlike_to_cast``   CastLike -> Cast to its second operand's type
- ``split_to_slices``    Split -> one Slice per output
- ``one_output_per_node`` a kernel node with several outputs -> one node per output
- ``scatter_to_table``   ScatterND / ScatterElements -> a gather through a constant table
- ``lower_einsum``       Einsum -> Transpose / Reshape / MatMul (+ ReduceSum)
- ``matmul_vectors_to_matrices`` MatMul of a 1-d operand -> a matrix product, reshaped
- ``absorb_const_operands`` constant operands that parametrise a kernel become its attributes
- ``scalar_results_as_views`` a kernel's 0-d result is computed as shape (1, ...) and viewed as 0-d
- ``simplify_transposes`` compose transposes, drop identities, size-1-only moves become Reshape
- ``scales_after_products`` a MatMul operand's scaling by a constant moved onto the product
- ``merge_sibling_products`` products of one activation by constant matrices -> one product, sliced
- ``sink_views``         an elementwise op behind a kernel's views computed in the kernel's shape
- ``convert_layout``     convolutions and pools (and elementwise ops between them) go NHWC
- ``optimize``           all of the above in order (the compiler's pipeline)
"""

from __future__ import annotations

from typing import Callable

from .. import strassen as _strassen  # noqa: F401  (registers the Strassen form and its operators)
from .. import winograd as _winograd  # noqa: F401  (registers the Winograd forms and their operators)
from ..forms import Plan, use_forms
from ..ir import Graph, GraphError
from ..ops import FOLD, REWRITE, op_def
from .canonical import (
    canonicalize_gemm,
    fuse_gelu,
    merge_sibling_products,
    scales_after_products,
    simplify_transposes,
)
from .infer import eliminate_dead_code, fold_constants, infer_types
from .kernel_forms import (
    absorb_const_operands,
    castlike_to_cast,
    lower_einsum,
    matmul_vectors_to_matrices,
    one_output_per_node,
    scalar_results_as_views,
    scatter_to_table,
    split_to_slices,
)
from .layout import TO_NCHW, TO_NHWC, convert_layout
from .lowering import (
    fold_batch_norm,
    lower_batch_norm,
    lower_conv3d,
    lower_losses,
    lower_lrn,
    lower_one_hot,
    lower_quantize,
    lower_recurrent,
    split_whole_reductions,
)
from .rewrite import _add_const, _new_value, remove_identities, scalar
from .views import sink_views

Pass = Callable[[Graph], Graph]

__all__ = [
    "TO_NCHW",
    "TO_NHWC",
    "absorb_const_operands",
    "canonicalize_gemm",
    "castlike_to_cast",
    "convert_layout",
    "eliminate_dead_code",
    "fold_batch_norm",
    "fold_constants",
    "fuse_gelu",
    "infer_types",
    "lower_batch_norm",
    "lower_conv3d",
    "lower_einsum",
    "lower_losses",
    "lower_lrn",
    "lower_one_hot",
    "lower_quantize",
    "lower_recurrent",
    "matmul_vectors_to_matrices",
    "one_output_per_node",
    "remove_identities",
    "scalar",
    "scalar_results_as_views",
    "scatter_to_table",
    "split_whole_reductions",
    "scales_after_products",
    "merge_sibling_products",
    "simplify_transposes",
    "sink_views",
    "split_to_slices",
    "_add_const",
    "_new_value",
    "Pass",
    "optimize",
    "canonicalize",
    "finish",
]




# --- the pipeline -----------------------------------------------------------------------------------
def optimize(
    graph: Graph, layout: str = "NHWC", forms: Plan | None = None
) -> Graph:
    """The compiler's pass pipeline, in order: ``canonicalize``, then ``finish`` (which takes the
    forms)."""
    return finish(canonicalize(graph, layout), forms)


def canonicalize(graph: Graph, layout: str = "NHWC") -> Graph:
    """The pipeline up to the algorithm forms: operators lowered to the compiler's own, constants
    folded, ``layout`` taken, sibling products merged. Every way of computing a model in forms
    starts from this one graph (``compiler.choose_forms`` makes it once)."""
    g = fold_constants(castlike_to_cast(graph))
    g = remove_identities(lower_recurrent(lower_quantize(lower_losses(lower_one_hot(lower_lrn(g))))))
    g = split_whole_reductions(g)
    g = split_to_slices(g)
    g = one_output_per_node(g)
    g = scatter_to_table(g)
    g = lower_einsum(g)
    g = matmul_vectors_to_matrices(g)
    g = canonicalize_gemm(g)
    g = fuse_gelu(g)
    g = fold_batch_norm(g)
    g = lower_conv3d(lower_batch_norm(g))
    g = convert_layout(g, layout)
    g = sink_views(scales_after_products(simplify_transposes(g)))
    return merge_sibling_products(fold_constants(g))


def finish(graph: Graph, forms: Plan | None = None) -> Graph:
    """The rest of the pipeline on a ``canonicalize``d graph (not changed): ``forms`` (one form for
    every node it fits, or node name -> form) computes nodes by fast algorithms
    (autotune.graph.forms); last, the products are set to ``graph.precision``
    (autotune.graph.precision)."""
    g = graph
    if forms:  # a form's kernels may end in views (Strassen's halves of each row): sink them again
        g = sink_views(use_forms(g, forms))
    g = scalar_results_as_views(g)
    g = absorb_const_operands(g)
    from ..precision import apply_precision  # it runs these passes' inference again

    g = apply_precision(g, g.precision)
    for n in g.nodes:
        if op_def(n.op).kind in (FOLD, REWRITE):
            raise GraphError(f"{n.op} node {n.name!r} has non-constant inputs the compiler cannot handle")
    return eliminate_dead_code(g)
