"""Fast algorithms as forms of a node: a graph rewrite that computes one operator (a convolution, a
product) by other kernels, with fewer multiply-adds and more memory traffic than the operator's
own kernel. Whether that pays depends on the shapes and the target, so each form is a tunable:
``tune.py --model`` tunes every form of every eligible node, and compile takes, node by node, the
form whose kernels' best recorded times add up to the least (``compiler.choose_forms``).

A form's rewrite replaces the node by nodes named ``node.name + suffix`` (one suffix per kernel it
becomes); the first of them tells the form apart (``Form.recognizes``). The forms:

- ``winograd2`` / ``winograd4``: 3x3 convolutions of stride 1 or 2 as Winograd F(m x m, 3 x 3)
  (``autotune.graph.winograd``);
- ``strassen`` / ``strassen2``: products with a constant matrix as one or two nested levels of
  Strassen's algorithm (``autotune.graph.strassen``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, Union

import numpy as np

from autotune.te import tensor as T
from autotune.te.expr import Expr, as_expr

from .ir import Graph, GraphError, Node

Plan = Union[str, Mapping[str, str]]  # one form for every eligible node, or node name -> form


@dataclass(frozen=True)
class Form:
    """One fast algorithm of an operator."""

    name: str  # "winograd4", "strassen"
    label: str  # how summaries name it: "F(4x4,3x3)", "Strassen"
    what: str  # what it computes, for summaries: "conv", "matmul"
    suffixes: tuple[str, ...]  # a rewritten node's kernels are named node.name + these
    eligible: Callable[[Graph, Node], bool]
    rewrite: Callable[[Graph, Node], list[Node]]  # the nodes in its place (constants added to g)
    recognizes: Callable[[Node], bool]  # the first node of a rewrite, as found in a graph


FORMS: dict[str, Form] = {}


def register_form(form: Form) -> Form:
    FORMS[form.name] = form
    return form


def get_form(name: str) -> Form:
    if name not in FORMS:
        raise GraphError(f"unknown algorithm form {name!r}; valid: {', '.join(sorted(FORMS))}")
    return FORMS[name]


def use_forms(graph: Graph, plan: Plan) -> Graph:
    """Rewrite nodes into their forms: every eligible node with form ``plan`` (a name), or those
    named in ``plan`` (a mapping) with theirs; nodes a form does not fit stay as they are."""
    from .passes import eliminate_dead_code, infer_types

    for name in [plan] if isinstance(plan, str) else plan.values():
        get_form(name)
    g = graph.copy()
    out: list[Node] = []
    for node in g.nodes:
        name = plan if isinstance(plan, str) else plan.get(node.name, "")
        form = FORMS.get(name)
        if form is None or not form.eligible(g, node):
            out.append(node)
            continue
        out.extend(form.rewrite(g, node))
    g.nodes = out
    return eliminate_dead_code(infer_types(g))


def forms_in(graph: Graph) -> dict[str, str]:
    """Node name -> form of every node of the source graph that ``graph`` computes in a form."""
    out: dict[str, str] = {}
    for n in graph.nodes:
        for f in FORMS.values():
            if f.recognizes(n) and n.name.endswith(f.suffixes[0]):
                out[n.name[: -len(f.suffixes[0])]] = f.name
    return out


def describe(forms: Mapping[str, str]) -> str:
    """``"6 convs as F(2x2,3x3), 4 matmuls as Strassen"`` of a node -> form plan ("" if empty)."""
    counts = {f: sum(v == f for v in forms.values()) for f in sorted(set(forms.values()))}
    parts = []
    for f, k in counts.items():
        form = get_form(f)
        parts.append(f"{k} {form.what}{'s' * (k != 1)} as {form.label}")
    return ", ".join(parts)


def default_forms(kind: str, winograd: int | Sequence[int] | None = None,
                  strassen: int | None = None) -> tuple[str, ...]:
    """The forms to tune and choose from on a target of ``kind``: Winograd tile sizes ``winograd``
    (None: the kind's default, ``winograd.DEFAULT_SIZES``; 0 or (): none) and Strassen's products
    up to ``strassen`` levels (0 or False: none; 1 or True: one level; 2: one and two levels;
    None: the kind's default, ``strassen.DEFAULT_LEVELS``)."""
    from . import strassen as st
    from . import winograd as wg

    names = [f"winograd{m}" for m in wg.default_sizes(kind, winograd)]
    levels = st.DEFAULT_LEVELS.get(kind, 0) if strassen is None else int(strassen)
    if levels not in (0, *st.LEVELS):
        raise GraphError(f"Strassen levels {levels}: valid 0 (off), {', '.join(map(str, st.LEVELS))}")
    names += [st.form_name(n) for n in st.LEVELS[:levels]]
    for n in names:
        get_form(n)
    return tuple(names)


# --- what the transforms of the forms share ----------------------------------------------------------
def coefficient(table: np.ndarray, row: Expr, col: int) -> Expr | None:
    """``table[row, col]`` for a symbolic row, as literals chosen by ``select`` (None if the
    column is all zero); a schedule that unrolls the row's axis turns it into one literal."""
    vals = [float(v) for v in table[:, col]]
    if not any(vals):
        return None
    out: Expr = as_expr(vals[-1])
    for r in range(len(vals) - 2, -1, -1):
        out = T.select(row <= r, vals[r], out)
    return out


def weighted(terms: Sequence[tuple[Expr | None, Expr]]) -> Expr:
    """The sum of ``c * v`` over the terms whose coefficient ``c`` is not None."""
    out: Expr | None = None
    for c, v in terms:
        if c is None:
            continue
        out = c * v if out is None else out + c * v
    assert out is not None
    return out
