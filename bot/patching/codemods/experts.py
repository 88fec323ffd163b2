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
and do one ``index_add_``. The same loop written the other ways public MoE
code writes it is read too: ``for e, expert in enumerate(self.experts)`` (or
``range(len(self.experts))`` with ``self.experts[e](x)``) over a list of expert
modules, whose call is inlined on the experts' stacked weights when their class
is defined in the file (:mod:`expert_modules`); an index mask first (``mask =
IDX == e`` then ``torch.where(mask)``) or ``torch.nonzero(..., as_tuple=True)``;
``torch.index_select(X, 0, tok)`` or ``X.index_select(0, tok)`` for ``X[tok]``.
Indices outside ``[0, N)`` (a dropped assignment
marked ``-1``) are skipped, as the loop skips them. The padded rows are zeros
that never reach the output. The code between the gather and the scatter must
be row-wise (each row's result depends on that row only): elementwise
functions and matmuls are; a normalisation over the rows of a group is not,
and is not recognised here (the loss check of a trial would catch it).
"""

from __future__ import annotations

import libcst as cst

from bot.patching.codemods.base import PatchCodemod
from bot.patching.codemods.expert_modules import ExpertForm, inline_call, read_expert, stack_lines
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
    SUMMARY = ("per-expert loop (torch.where or an index mask, X[tok] or index_select, index_add_ scatter; weights "
               "stacked or a list of expert modules) → sorted, padded groups and batched matmuls")
    NOT_FOUND = ("no loop over experts (`for e in range(N)`, `for e, expert in enumerate(self.experts)`) that "
                 "gathers with `tok, slot = torch.where(IDX == e)` and scatters with `OUT.index_add_(0, tok, ...)`")

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.BaseStatement | cst.FlattenSentinel:
        match = self._match(original_node)
        if match is None:
            return updated_node
        if not self.site_allowed("expert dispatch loop"):
            return updated_node
        self.mark_edited()
        return cst.FlattenSentinel(match)

    def _header(self, loop: cst.For) -> tuple[str, str | None, str | None, str] | None:
        """(expert index, module variable, ``self.<container>`` of module experts, expert count) of
        ``for e in range(N)``, ``for e, expert in enumerate(self.experts)`` or ``for e in range(len(self.experts))``."""
        it = loop.iter
        if not isinstance(it, cst.Call) or len(it.args) != 1 or it.args[0].keyword is not None:
            return None
        arg = it.args[0].value
        if _name(it.func) == "range" and _name(loop.target) is not None:
            container = _self_container(arg.args[0].value) if isinstance(arg, cst.Call) and _name(arg.func) == "len" \
                and len(arg.args) == 1 else None
            return _name(loop.target), None, container, code_of(arg)  # type: ignore[return-value]
        if _name(it.func) == "enumerate" and isinstance(loop.target, cst.Tuple) and len(loop.target.elements) == 2:
            index, module = (_name(el.value) for el in loop.target.elements)
            container = _self_container(arg)
            if index is not None and module is not None and container is not None:
                return index, module, container, f"len(self.{container})"
        return None

    def _where(self, body: list[cst.BaseStatement], expert: str
               ) -> tuple[str, str, cst.BaseExpression, int] | None:
        """(token, slot, the expert indices, statements read) of ``tok, slot = torch.where(IDX == e)``, also as
        an index mask first (``mask = IDX == e`` then ``torch.where(mask)``) or ``torch.nonzero(..., as_tuple=True)``."""
        first = self._simple(body[0])
        mask_name, mask_cond, read = None, None, 1
        if isinstance(first, cst.Assign) and len(first.targets) == 1 and _name(first.targets[0].target) \
                and isinstance(first.value, cst.Comparison):
            mask_name, mask_cond = _name(first.targets[0].target), first.value
            first, read = self._simple(body[1]) if len(body) > 1 else None, 2
        if not isinstance(first, cst.Assign) or len(first.targets) != 1:
            return None
        target = first.targets[0].target
        if not isinstance(target, cst.Tuple) or len(target.elements) != 2:
            return None
        token, slot = (_name(el.value) for el in target.elements)
        if token is None or slot is None:
            return None
        call = first.value
        nonzero = self.is_call_to(call, {"torch.nonzero"}) and len(call.args) == 2 \
            and call.args[1].keyword is not None and call.args[1].keyword.value == "as_tuple" \
            and code_of(call.args[1].value) == "True"
        if not ((self.is_call_to(call, {"torch.where"}) and len(call.args) == 1) or nonzero):
            return None
        cond = call.args[0].value  # type: ignore[union-attr]
        if mask_name is not None and _name(cond) == mask_name:
            cond = mask_cond
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
        if mask_name is not None and any(mask_name in _names_in(s) for s in body[read:]):
            self.decline(f"expert loop found, but its index mask `{mask_name}` is used after the torch.where")
            return None
        return token, slot, indices, read

    def _match(self, loop: cst.For) -> list[cst.BaseStatement] | None:
        header = self._header(loop)
        if header is None:
            return None
        expert, module, container, n_experts = header
        if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock):
            return None
        body = [_IndexSelect(self).visit_statement(s) for s in loop.body.body]
        if len(body) < 3:
            return None
        found = self._where(body, expert)
        if found is None:
            return None
        token, slot, indices, read = found
        prelude: list[str] = []
        if container is not None:
            body, prelude = self._inline_experts(body, read, expert, module, container)  # type: ignore[assignment]
            if not body:
                return None
        body = body[read - 1:]
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
            *prelude,
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

    def _inline_experts(self, body: list[cst.BaseStatement], read: int, expert: str, module: str | None,
                        container: str) -> tuple[list[cst.BaseStatement], list[str]]:
        """The loop body with each call of an expert module (``module(x)``, ``self.<container>[e](x)``) inlined on
        stacked weights, and the lines that stack them (expert_modules.py); an empty body: declined."""
        owner = self.owner_class
        form = read_expert(self.module_node, owner.name.value, container) if owner is not None else \
            "the loop is not in a method of a class"
        if isinstance(form, str):
            self.decline(f"expert loop over `self.{container}` found, but {form}")
            return [], []
        refs = {name: code_of(self.ref(name)) for name in set(form.activations.values())}
        calls = _ExpertCalls(expert, module, container, form, refs)
        out = [s.visit(calls) if i >= read else s for i, s in enumerate(body)]
        if calls.problem:
            self.decline(f"expert loop over `self.{container}` found, but {calls.problem}")
            return [], []
        if not calls.inlined or (module is not None and any(module in _names_in(s) for s in out[read:])):
            self.decline(f"expert loop over `self.{container}` found, but the expert is used other than called "
                         "once on its gathered rows")
            return [], []
        return out, stack_lines(form, container, calls.used)

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


def _self_container(node: cst.BaseExpression) -> str | None:
    """``experts`` of ``self.experts``."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


class _IndexSelect(cst.CSTTransformer):
    """``torch.index_select(X, 0, tok)`` and ``X.index_select(0, tok)`` → ``X[tok]``: the same gather."""

    def __init__(self, codemod: PatchCodemod) -> None:
        super().__init__()
        self.codemod = codemod

    def visit_statement(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        return statement.visit(self)  # type: ignore[return-value]

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        args = updated_node.args
        if any(a.keyword is not None for a in args):
            return updated_node
        if self.codemod.is_call_to(original_node, {"torch.index_select"}) and len(args) == 3 \
                and code_of(args[1].value) == "0":
            source, index = args[0].value, args[2].value
        elif isinstance(updated_node.func, cst.Attribute) and updated_node.func.attr.value == "index_select" \
                and len(args) == 2 and code_of(args[0].value) == "0":
            source, index = updated_node.func.value, args[1].value
        else:
            return updated_node
        return cst.Subscript(value=source, slice=[cst.SubscriptElement(slice=cst.Index(value=index))])


class _ExpertCalls(cst.CSTTransformer):
    """Each call of the loop's expert module, inlined on per-expert stacked weights."""

    def __init__(self, expert: str, module: str | None, container: str, form: ExpertForm,
                 refs: dict[str, str]) -> None:
        super().__init__()
        self.expert, self.module, self.container, self.form, self.refs = expert, module, container, form, refs
        self.inlined = 0
        self.used: set[str] = set()
        self.problem = ""

    def _is_expert(self, func: cst.BaseExpression) -> bool:
        if self.module is not None and _name(func) == self.module:
            return True
        return isinstance(func, cst.Subscript) and _self_container(func.value) == self.container \
            and _name(_single_index(func)) == self.expert

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not self._is_expert(original_node.func):
            return updated_node
        if len(updated_node.args) != 1 or updated_node.args[0].keyword is not None:
            self.problem = f"the expert is called as `{code_of(original_node)}`"
            return updated_node
        inlined = inline_call(self.form, updated_node.args[0].value, self.expert, self.refs)
        if isinstance(inlined, str):
            self.problem = inlined
            return updated_node
        self.inlined += 1
        self.used |= {a for a in self.form.linears if f"{_P}{a}_w" in code_of(inlined)}
        return cst.parse_expression(f"({code_of(inlined)})")
