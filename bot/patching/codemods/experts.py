"""A Python loop over MoE experts → one grouped, padded batched matmul per weight.

Matches the dispatch loop research MoE code usually starts with::

    for e in range(N):
        tok, slot = torch.where(IDX == e)          # IDX: (tokens, top_k) expert indices
        if tok.numel() == 0:                        # optional
            continue
        h = F.gelu(X[tok] @ W_IN[e])                # any straight-line assignments that
        y = h @ W_OUT[e]                            # use X[tok] and per-expert weights P[e]
        OUT.index_add_(0, tok, y * GATE[tok, slot].unsqueeze(-1))

and replaces it with: sort the (token, slot) assignments by expert (stable, so
each output row still receives its experts' contributions in expert order),
scatter the gathered rows into a zero-padded ``(N, capacity, d)`` tensor, run
the same straight-line code once on all experts (``P[e]`` on the right of
``@`` becomes ``P``, a batched matmul; any other ``P[e]`` becomes
``P.unsqueeze(1)``, broadcasting a per-expert vector), gather the rows back
and do one ``index_add_``. Indices outside ``[0, N)`` (a dropped assignment
marked ``-1``) are skipped, as the loop skips them. The padded rows are zeros
that never reach the output. The code between the gather and the scatter must
be row-wise (each row's result depends on that row only): elementwise
functions and matmuls are; a normalisation over the rows of a group is not,
and is not recognised here (the loss check of a trial would catch it).
"""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_P = "_grp_"


def _name(node: cst.BaseExpression | None) -> str | None:
    return node.value if isinstance(node, cst.Name) else None


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

    node.visit(V())
    return found


def _single_index(node: cst.Subscript) -> cst.BaseExpression | None:
    if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    return node.slice[0].slice.value


class _Grouped(cst.CSTTransformer):
    """Rewrites the loop body's straight-line code to act on all experts at once."""

    def __init__(self, expert: str, token: str, gathered: dict[str, str]) -> None:
        super().__init__()
        self.expert, self.token, self.gathered = expert, token, gathered
        self._rhs: set[int] = set()

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply) and isinstance(node.right, cst.Subscript):
            self._rhs.add(id(node.right))

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        index = _single_index(original_node)
        if _name(index) == self.expert:  # P[e]
            if id(original_node) in self._rhs:
                return updated_node.value.with_changes(lpar=(), rpar=())
            return cst.parse_expression(f"({code_of(original_node.value)}).unsqueeze(1)")
        if _name(index) == self.token:  # X[tok]
            key = code_of(original_node.value)
            if key in self.gathered:
                return cst.Name(self.gathered[key])
        return updated_node


class _GatherBack(cst.CSTTransformer):
    """In the scatter's value, every grouped intermediate is read back per assignment."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if original_node.value in self.names:
            return cst.parse_expression(f"{original_node.value}[{_P}expert, {_P}pos]")
        return updated_node


class GroupedExperts(PatchCodemod):
    NAME = "grouped_experts"
    NEEDS = ("index_add",)
    SUMMARY = "per-expert loop (torch.where gather, index_add_ scatter) → sorted, padded groups and batched matmuls"
    NOT_FOUND = ("no loop `for e in range(N)` over experts that gathers with `tok, slot = torch.where(IDX == e)` "
                 "and scatters with `OUT.index_add_(0, tok, ...)`")

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.BaseStatement | cst.FlattenSentinel:
        match = self._match(original_node)
        if match is None:
            return updated_node
        if not self.site_allowed("expert dispatch loop"):
            return updated_node
        self.mark_edited()
        return cst.FlattenSentinel(match)

    def _match(self, loop: cst.For) -> list[cst.BaseStatement] | None:
        expert = _name(loop.target)
        it = loop.iter
        if expert is None or not isinstance(it, cst.Call) or _name(it.func) != "range" or len(it.args) != 1:
            return None
        if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock):
            return None
        n_experts = code_of(it.args[0].value)
        body = list(loop.body.body)
        if len(body) < 3:
            return None
        first = self._simple(body[0])
        if not isinstance(first, cst.Assign) or len(first.targets) != 1:
            return None
        target = first.targets[0].target
        if not isinstance(target, cst.Tuple) or len(target.elements) != 2:
            return None
        token, slot = (_name(el.value) for el in target.elements)
        if token is None or slot is None:
            return None
        where = first.value
        if not (self.is_call_to(where, {"torch.where"}) and len(where.args) == 1):
            return None
        cond = where.args[0].value
        if not (isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1
                and isinstance(cond.comparisons[0].operator, cst.Equal)):
            return None
        left, right = cond.left, cond.comparisons[0].comparator
        if _name(right) == expert:
            indices = left
        elif _name(left) == expert:
            indices = right
        else:
            return None
        rest = body[1:]
        if isinstance(rest[0], cst.If) and self._is_empty_guard(rest[0], token):
            rest = rest[1:]
        if len(rest) < 2:
            return None
        last = self._simple(rest[-1])
        scatter = last.value if isinstance(last, cst.Expr) else None
        if not (isinstance(scatter, cst.Call) and isinstance(scatter.func, cst.Attribute)
                and scatter.func.attr.value == "index_add_" and len(scatter.args) == 3
                and all(a.keyword is None for a in scatter.args)
                and code_of(scatter.args[0].value) == "0" and _name(scatter.args[1].value) == token):
            self.decline("expert loop found, but its last statement is not `OUT.index_add_(0, tok, value)`")
            return None
        middle = []
        for stmt in rest[:-1]:
            simple = self._simple(stmt)
            if not (isinstance(simple, cst.Assign) and len(simple.targets) == 1
                    and isinstance(simple.targets[0].target, cst.Name)):
                self.decline("expert loop found, but its body is not straight-line assignments between the "
                             "gather and the scatter")
                return None
            middle.append(simple)
        gathered: dict[str, str] = {}
        collect = _Gathered(token)
        for stmt in middle:
            stmt.visit(collect)
        for i, key in enumerate(dict.fromkeys(collect.sources)):
            gathered[key] = f"{_P}x{i}"
        if not gathered:
            self.decline("expert loop found, but no `X[tok]` gather between the where and the scatter")
            return None
        rewrite = _Grouped(expert, token, gathered)
        new_middle = [cst.SimpleStatementLine(body=[m.visit(rewrite)]) for m in middle]
        leftover = set().union(*(_names_in(m) for m in new_middle))
        if expert in leftover or token in leftover or slot in leftover:
            self.decline(f"expert loop found, but `{expert}`, `{token}` or `{slot}` is used other than as "
                         f"`P[{expert}]` / `X[{token}]` between the gather and the scatter")
            return None
        assigned = {m.targets[0].target.value for m in middle}  # type: ignore[union-attr]
        value = scatter.args[2].value
        if expert in _names_in(value):
            self.decline(f"expert loop found, but the scattered value uses `{expert}` directly")
            return None
        value = value.visit(_GatherBack(assigned))
        torch = code_of(self.ref("torch.argsort")).rsplit(".", 1)[0]
        idx = code_of(indices)
        lines = [
            f"{_P}flat = ({idx}).reshape(-1)",
            f"{_P}valid = ({_P}flat >= 0) & ({_P}flat < {n_experts})",
            f"{_P}order = {torch}.argsort({torch}.where({_P}valid, {_P}flat, {n_experts}), stable=True)"
            f"[: int({_P}valid.sum())]",
            f"{_P}expert = {_P}flat[{_P}order]",
            f"{token} = {_P}order // ({idx}).shape[-1]",
            f"{slot} = {_P}order % ({idx}).shape[-1]",
            f"{_P}counts = {torch}.bincount({_P}expert, minlength={n_experts})",
            f"{_P}pos = {torch}.arange({_P}expert.numel(), device={_P}expert.device) - "
            f"({torch}.cumsum({_P}counts, 0) - {_P}counts)[{_P}expert]",
            f"{_P}cap = int({_P}counts.max()) if {_P}expert.numel() else 0",
        ]
        for source, grouped in gathered.items():
            lines.append(f"{grouped} = ({source}).new_zeros(({n_experts}, {_P}cap, ({source}).shape[-1]))")
            lines.append(f"{grouped}[{_P}expert, {_P}pos] = ({source})[{token}]")
        out: list[cst.BaseStatement] = [cst.parse_statement(line) for line in lines]
        if loop.leading_lines:
            out[0] = out[0].with_changes(leading_lines=loop.leading_lines)
        out += new_middle
        new_scatter = scatter.with_changes(args=[scatter.args[0], scatter.args[1],
                                                 scatter.args[2].with_changes(value=value)])
        out.append(cst.SimpleStatementLine(body=[cst.Expr(new_scatter)]))
        return out

    @staticmethod
    def _simple(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            return stmt.body[0]
        return None

    @staticmethod
    def _is_empty_guard(stmt: cst.If, token: str) -> bool:
        if stmt.orelse is not None:
            return False
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) \
                or not isinstance(body[0].body[0], cst.Continue):
            return False
        text = code_of(stmt.test).replace(" ", "")
        return text in (f"{token}.numel()==0", f"len({token})==0", f"not{token}.numel()", f"{token}.shape[0]==0")


class _Gathered(cst.CSTVisitor):
    def __init__(self, token: str) -> None:
        self.token = token
        self.sources: list[str] = []

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if _name(_single_index(node)) == self.token:
            self.sources.append(code_of(node.value))
