"""Canonical forms: Gemm as MatMul, GELU recognised, transposes composed, scalings of a product's
operands moved onto the product."""


from __future__ import annotations

import math

import numpy as np

from ..ir import Graph, Node, TensorType
from ..ops import (
    transpose_perm,
)
from .infer import eliminate_dead_code, infer_types
from .rewrite import _add_const, _bypass, _new_value, scalar


# --- canonicalization -------------------------------------------------------------------------------
def canonicalize_gemm(graph: Graph) -> Graph:
    """Gemm -> MatMul with a [K, N] right operand (pre-transposed when constant), then an optional
    Mul by alpha and an Add of beta * C."""
    g = graph.copy()
    out: list[Node] = []
    for n in g.nodes:
        if n.op != "Gemm":
            out.append(n)
            continue
        a, b = n.inputs[0], n.inputs[1]
        c = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else None
        alpha, beta = float(n.attrs.get("alpha", 1.0)), float(n.attrs.get("beta", 1.0))
        y_t = g.types[n.outputs[0]]
        if n.attrs.get("transA", 0):
            if a in g.consts:
                a = _add_const(g, a + "_T", g.consts[a].T)
            else:
                at = _new_value(g, a + "_T", TensorType(g.types[a].shape[::-1], g.types[a].dtype))
                out.append(Node("Transpose", [a], [at], {"perm": [1, 0]}, n.name + "_transA"))
                a = at
        if n.attrs.get("transB", 0):
            if b in g.consts:
                b = _add_const(g, b + "_T", g.consts[b].T)
            else:
                bt = _new_value(g, b + "_T", TensorType(g.types[b].shape[::-1], g.types[b].dtype))
                out.append(Node("Transpose", [b], [bt], {"perm": [1, 0]}, n.name + "_transB"))
                b = bt
        steps: list[tuple[str, list[str]]] = [("MatMul", [a, b])]
        if alpha != 1.0:
            steps.append(("Mul", ["", _add_const(g, n.name + "_alpha", np.float32(alpha))]))
        if c is not None:
            if c in g.consts:
                cc = _add_const(g, c + "_beta", (beta * g.consts[c]).astype(np.float32)) if beta != 1.0 else c
            else:
                cc = c
                if beta != 1.0:
                    cb = _new_value(g, c + "_beta", g.types[c])
                    out.append(
                        Node(
                            "Mul",
                            [c, _add_const(g, n.name + "_beta", np.float32(beta))],
                            [cb],
                            {},
                            n.name + "_beta",
                        )
                    )
                    cc = cb
            steps.append(("Add", ["", cc]))
        prev = ""
        for i, (op, ins) in enumerate(steps):
            last = i == len(steps) - 1
            dst = n.outputs[0] if last else _new_value(g, f"{n.name}_{op.lower()}", y_t)
            ins = [prev if x == "" else x for x in ins]
            out.append(Node(op, ins, [dst], {}, n.name if i == 0 else f"{n.name}_{op.lower()}"))
            prev = dst
    g.nodes = out
    return infer_types(eliminate_dead_code(g))


def _close(v: float | None, target: float, tol: float = 1e-3) -> bool:
    return v is not None and abs(v - target) <= tol * abs(target)


def fuse_gelu(graph: Graph) -> Graph:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` -- as exporters write it, in any association of the
    products and with ``x * (1/sqrt 2)`` for the division -- becomes one Gelu node."""
    g = graph.copy()
    changed = True
    while changed:
        changed = False
        for erf in [n for n in g.nodes if n.op == "Erf"]:
            match = _match_gelu(g, erf)
            if match is None:
                continue
            x, removed, out = match
            last = max(g.nodes.index(r) for r in removed)
            gelu = Node("Gelu", [x], [out], {}, g.fresh_name(erf.name + "_gelu"))
            g.nodes.insert(last + 1, gelu)
            for r in removed:
                g.nodes.remove(r)
            changed = True
            break
    return eliminate_dead_code(infer_types(g))


def _match_gelu(g: Graph, erf: Node) -> tuple[str, list[Node], str] | None:
    prod, cons = g.producer(), g.consumers()

    def only(v: str) -> Node | None:
        users = cons.get(v, [])
        return users[0] if len(users) == 1 and v not in g.outputs else None

    def other(n: Node, v: str) -> str | None:
        if len(n.inputs) != 2 or v not in n.inputs:
            return None
        return n.inputs[1] if n.inputs[0] == v else n.inputs[0]

    pre = prod.get(erf.inputs[0])
    if pre is None or only(erf.inputs[0]) is not erf:
        return None
    if pre.op == "Div" and _close(scalar(g, pre.inputs[1]), math.sqrt(2.0)):
        x = pre.inputs[0]
    elif pre.op == "Mul":
        x = next((v for v in pre.inputs if scalar(g, v) is None), None)
        c = other(pre, x) if x else None
        if x is None or c is None or not _close(scalar(g, c), 1.0 / math.sqrt(2.0)):
            return None
    else:
        return None
    add = only(erf.outputs[0])
    if add is None or add.op != "Add" or not _close(scalar(g, other(add, erf.outputs[0]) or ""), 1.0):
        return None
    a = add.outputs[0]
    m1 = only(a)
    if m1 is None or m1.op != "Mul":
        return None
    o1 = other(m1, a)
    if o1 is None:
        return None
    nodes = [pre, erf, add, m1]
    if o1 == x:  # (x * a) * 0.5
        m2 = only(m1.outputs[0])
        if m2 is None or m2.op != "Mul" or not _close(scalar(g, other(m2, m1.outputs[0]) or ""), 0.5):
            return None
        return x, nodes + [m2], m2.outputs[0]
    if _close(scalar(g, o1), 0.5):  # (a * 0.5) * x
        m2 = only(m1.outputs[0])
        if m2 is None or m2.op != "Mul" or other(m2, m1.outputs[0]) != x:
            return None
        return x, nodes + [m2], m2.outputs[0]
    half = prod.get(o1)  # (x * 0.5) * a
    if half is not None and half.op == "Mul" and only(o1) is m1 and other(half, x) is not None:
        if _close(scalar(g, other(half, x) or ""), 0.5):
            return x, nodes + [half], m1.outputs[0]
    return None


def simplify_transposes(graph: Graph) -> Graph:
    """Transpose of a transpose -> one transpose; identity permutations disappear; a transpose
    that moves only size-1 dims is a Reshape (no data movement)."""
    g = graph.copy()
    changed = True
    while changed:
        changed = False
        prod, cons = g.producer(), g.consumers()
        for n in g.nodes:
            if n.op != "Transpose":
                continue
            x = n.inputs[0]
            shape = g.types[x].shape
            perm = transpose_perm(n, len(shape))
            first = prod.get(x)
            if first is not None and first.op == "Transpose" and cons.get(x) == [n] and x not in g.outputs:
                p1 = transpose_perm(first, len(g.types[first.inputs[0]].shape))
                n.inputs = [first.inputs[0]]
                n.attrs = {"perm": [p1[p] for p in perm]}
                g.nodes.remove(first)
                del g.types[x]
                changed = True
                break
            if perm == list(range(len(shape))):
                if _bypass(g, n):
                    changed = True
                    break
                continue
            moved = [p for p in perm if shape[p] != 1]
            if moved == sorted(moved):
                out_shape = np.asarray([shape[p] for p in perm], dtype=np.int64)
                spec = _add_const(g, n.name + "_shape", out_shape)
                n.op, n.inputs, n.attrs = "Reshape", [x, spec], {}
                changed = True
                break
    return eliminate_dead_code(infer_types(g))


def scales_after_products(graph: Graph) -> Graph:
    """A float MatMul operand multiplied or divided by a one-element constant (attention's
    ``q * s`` and ``k * s`` as exporters decompose scaled dot-product attention, ``q / sqrt(d)``):
    the product reads the unscaled operand and the scaling is applied to its result, where it is
    the product's epilogue; the operand is then a plain index map that the product can read in
    place (``graph.fusion``'s prologue). The same value up to rounding."""
    g = graph.copy()
    prod, cons = g.producer(), g.consumers()
    changed = False
    for m in [n for n in g.nodes if n.op == "MatMul"]:
        for p in (0, 1):
            x = m.inputs[p]
            u = prod.get(x)
            if u is None or u.op not in ("Mul", "Div") or x in g.outputs or cons.get(x) != [m]:
                continue
            if g.types[x].dtype not in ("float32", "float64"):
                continue
            consts = [i for i, v in enumerate(u.inputs) if scalar(g, v) is not None]
            if u.op == "Div" and consts != [1] or u.op == "Mul" and len(consts) != 1:
                continue
            t, c = u.inputs[1 - consts[0]], u.inputs[consts[0]]
            if g.types[t].shape != g.types[x].shape:
                continue
            y = m.outputs[0]
            unscaled = _new_value(g, f"{y}_unscaled", g.types[y])
            m.inputs[p], m.outputs = t, [unscaled]
            pos = g.nodes.index(m)
            g.nodes.insert(pos + 1, Node(u.op, [unscaled, c], [y], {}, g.fresh_name(f"{u.name}_after")))
            g.nodes.remove(u)
            prod, cons = g.producer(), g.consumers()
            changed = True
    return eliminate_dead_code(infer_types(g)) if changed else g


def merge_sibling_products(graph: Graph) -> Graph:
    """Products of one activation by constant matrices of the same K (attention's query, key and
    value projections) -> one product by the matrices side by side, each result a Slice of it
    along the last axis; a bias Add that was each one's only consumer comes along (the biases side
    by side, zeros where a product had none). The activation is read, and transformed by a
    product's form, once instead of once per product; the same values."""
    g = graph.copy()
    cons = g.consumers()
    groups: dict[tuple[str, int], list[Node]] = {}
    for n in g.nodes:
        if n.op != "MatMul" or n.inputs[1] not in g.consts:
            continue
        w, a = g.consts[n.inputs[1]], g.types.get(n.inputs[0])
        if w.ndim == 2 and w.dtype == np.float32 and a is not None and a.dtype == "float32" \
                and len(a.shape) >= 2 and a.shape[-1] == w.shape[0]:
            groups.setdefault((n.inputs[0], w.shape[0]), []).append(n)
    changed = False
    for (a, _), members in groups.items():
        if len(members) < 2:
            continue
        biases = [_bias_of(g, m, cons) for m in members]
        widths = [g.consts[m.inputs[1]].shape[1] for m in members]
        name = members[0].name + "_siblings"
        w = _add_const(g, name + "_w", np.concatenate([g.consts[m.inputs[1]] for m in members], axis=1))
        lead = g.types[members[0].outputs[0]].shape[:-1]
        merged = _new_value(g, name, TensorType((*lead, sum(widths)), "float32"))
        new = [Node("MatMul", [a, w], [merged], {}, name)]
        if any(b is not None for b in biases):
            vec = np.concatenate([np.zeros(k, np.float32) if b is None else g.consts[b[1]].reshape(k)
                                  for b, k in zip(biases, widths)])
            biased = _new_value(g, name + "_bias", g.types[merged])
            new.append(Node("Add", [merged, _add_const(g, name + "_b", vec)], [biased], {}, name + "_bias"))
            merged = biased
        start = 0
        for m, b, k in zip(members, biases, widths):
            y = (m if b is None else b[0]).outputs[0]
            attrs = {"_starts": [start], "_ends": [start + k], "_axes": [len(lead)], "_steps": [1]}
            new.append(Node("Slice", [merged], [y], attrs, g.fresh_name(m.name + "_slice")))
            start += k
        gone = {id(m) for m in members} | {id(b[0]) for b in biases if b is not None}
        pos = min(g.nodes.index(m) for m in members)
        g.nodes = [n for n in g.nodes[:pos] if id(n) not in gone] + new \
            + [n for n in g.nodes[pos:] if id(n) not in gone]
        changed = True
    return eliminate_dead_code(infer_types(g)) if changed else graph


def _bias_of(g: Graph, m: Node, cons: dict[str, list[Node]]) -> tuple[Node, str] | None:
    """The Add of a constant vector over the last axis that is the only consumer of ``m``'s result,
    and the vector's name."""
    y = m.outputs[0]
    users = cons.get(y, [])
    if len(users) != 1 or users[0].op != "Add" or y in g.outputs:
        return None
    add = users[0]
    other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
    c, k = g.consts.get(other), g.types[y].shape[-1]
    if c is None or c.dtype != np.float32 or c.size != k or c.shape[-1:] != (k,) \
            or g.types[add.outputs[0]].shape != g.types[y].shape:
        return None
    return add, other
