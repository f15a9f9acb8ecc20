"""Tensor-expression language: placeholders, computes, reductions, math, the op library, workloads."""

from .expr import Expr, IterVar, Var, all_of, any_of, equal, not_equal
from .registry import WorkloadError, make_workload, op_names, op_spec, workload_from_description
from .tensor import (
    Tensor,
    cast,
    compute,
    erf,
    exp,
    fabs,
    log,
    max,
    max_reduce,
    min,
    min_reduce,
    placeholder,
    power,
    reduce_axis,
    rsqrt,
    select,
    sigmoid,
    sqrt,
    sum,
    tanh,
    where,
)
from .workload import Workload, count_flops, structural_key, topo_order

__all__ = [
    "Expr", "IterVar", "Var", "all_of", "any_of", "equal", "not_equal",
    "WorkloadError", "make_workload", "op_names", "op_spec", "workload_from_description",
    "Tensor", "cast", "compute", "erf", "exp", "fabs", "log", "max", "max_reduce", "min", "min_reduce",
    "placeholder", "power", "reduce_axis", "rsqrt", "select", "sigmoid", "sqrt", "sum", "tanh", "where",
    "Workload", "count_flops", "structural_key", "topo_order",
]
