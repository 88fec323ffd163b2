"""Hand-written causal attention → ``F.scaled_dot_product_attention(q, k, v, is_causal=True)``.

Recognises the nanoGPT spelling and its close relatives, as consecutive lines::

    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))   # or / sqrt(d), or * scale
    att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
    att = F.softmax(att, dim=-1)                                       # or torch.softmax / att.softmax
    att = self.attn_dropout(att)                                       # optional
    y = att @ v                                                        # or torch.matmul(att, v)

and only rewrites it when the mask is *provably* causal: it must come from
``torch.tril(torch.ones(...))`` (or ``triu(..., diagonal=1)`` used the other way
round), followed through locals and ``self.register_buffer``, and be sliced
top-left (``[..., :T, :T]``), which is what ``is_causal=True`` means. A scale
that is not ``1/sqrt(head_dim)`` of ``q``/``k`` is passed as ``scale=``, so the
result is the same function. The mask buffer stays registered (removing it would
change the module's buffers); the attention weights must not be used afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from bot.patching.codemods import exprs as E
from bot.patching.codemods.base import PatchCodemod
from bot.patching.symbols import code_of

_SOFTMAX = {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"}
_MATMUL = {"torch.matmul"}
_TRIL = {"torch.tril"}
_TRIU = {"torch.triu"}
_ONES = {"torch.ones", "torch.ones_like"}
_DROPOUT = {"torch.nn.functional.dropout"}
_SQRT = {"math.sqrt", "numpy.sqrt", "np.sqrt"}
_PASS_THROUGH = {"view", "reshape", "bool", "to", "float", "int", "long", "byte", "half", "unsqueeze",
                 "contiguous", "type_as", "type", "cuda", "cpu", "detach", "expand", "expand_as", "clone"}
_TRANSPOSES = {(-2, -1), (-1, -2), (2, 3), (3, 2)}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Found:
    end: int  # index of the last statement of the pattern (``y = att @ v``)
    call: cst.Call


class CausalAttentionToSDPA(PatchCodemod):
    NAME = "sdpa_causal_attention"
    NEEDS = ("softmax",)
    SUMMARY = ("hand-written causal attention (softmax(q·kᵀ·scale + causal mask)·v) → "
               "F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    NOT_FOUND = ("no hand-written attention (`att = q @ k.transpose(-2, -1) ...`, masked_fill, "
                 "softmax, `att @ v` on consecutive lines) in the targets")

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        if self.function is None:
            return updated_node
        body = list(updated_node.body)
        originals = original_node.body
        out: list[cst.BaseStatement] = []
        i = 0
        while i < len(originals):
            found = self._match(originals, i)
            if isinstance(found, str):
                self.decline(found)
            elif found is not None and self.site_allowed("hand-written attention"):
                final = body[found.end]
                assert isinstance(final, cst.SimpleStatementLine)
                small = final.body[0]
                assert isinstance(small, cst.Assign | cst.Return)
                call = found.call.with_changes(func=self.ref("torch.nn.functional.scaled_dot_product_attention"))
                out.append(final.with_changes(body=[small.with_changes(value=call)],
                                              leading_lines=body[i].leading_lines))
                self.mark_edited()
                i = found.end + 1
                continue
            out.append(body[i])
            i += 1
        return updated_node.with_changes(body=out) if out != body else updated_node

    # -- the pattern ------------------------------------------------------------

    def _match(self, body: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement], i: int) -> _Found | str | None:
        first = E.name_assign(body[i])
        if first is None:
            return None
        att, score_expr = first
        score = self._score(score_expr)
        if score is None:
            return None
        q, k, scale = score
        chain = [att]  # every name the scores/weights pass through
        j = i + 1
        if scale == "none" and j < len(body):  # the scale may be its own line: att = att * s
            extra = self._separate_scale(body[j], att)
            if extra is not None:
                scale, j = extra, j + 1
        if j >= len(body):
            return f"`{att} = q @ kᵀ` is not followed by a causal mask (non-causal attention is left alone)"
        masked = self._mask(body[j], chain[-1])
        if masked[1] is not None:
            return masked[1]
        chain.append(masked[0])  # type: ignore[arg-type]
        j += 1
        weights = self._softmax(body[j], chain[-1]) if j < len(body) else None
        if weights is None:
            return f"the masked scores `{chain[-1]}` are not followed by `softmax(..., dim=-1)`"
        chain.append(weights)
        j += 1
        dropout_p: cst.BaseExpression | None = None
        if j < len(body):
            dropout = self._dropout(body[j], chain[-1])
            if isinstance(dropout, str):
                return dropout
            if dropout is not None:
                dropout_p, name = dropout
                chain.append(name)
                j += 1
        output = self._output(body[j], chain[-1]) if j < len(body) else None
        if output is None:
            return f"the attention weights `{chain[-1]}` are not followed by `y = {chain[-1]} @ v`"
        target, v = output
        if set(chain) & E.names_in(v):
            return f"`{code_of(v)}` reads the attention scores themselves"
        names = set(chain) - ({target.value} if isinstance(target, cst.Name) else set())
        for name in sorted(names):
            if any(E.count_name(s, name) for s in body[j + 1:]):
                return (f"`{name}` (scores or attention weights) is used after the attention output; "
                        "scaled_dot_product_attention does not return it")
        args = [cst.Arg(E.strip(q)), cst.Arg(E.strip(k)), cst.Arg(E.strip(v))]
        if dropout_p is not None:
            args.append(E.kwarg("dropout_p", dropout_p))
        args.append(E.kwarg("is_causal", cst.Name("True")))
        if scale not in ("default", "none"):
            assert isinstance(scale, cst.BaseExpression)
            args.append(E.kwarg("scale", scale))
        elif scale == "none":
            args.append(E.kwarg("scale", cst.Float("1.0")))
        return _Found(end=j, call=cst.Call(func=cst.Name("sdpa"), args=args))

    def _score(self, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression, object] | None:
        """(q, k, scale) for ``q @ kᵀ`` times or divided by a scale; scale is an expression,
        ``"default"`` (1/sqrt(head_dim)) or ``"none"`` (no scaling on this line)."""
        node = E.strip(node)
        qk = self._qk(node)
        if qk is not None:
            return (*qk, "none")
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            for product, factor in ((node.left, node.right), (node.right, node.left)):
                qk = self._qk(product)
                if qk is not None:
                    return (*qk, self._multiplier(factor, *qk))
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            qk = self._qk(node.left)
            if qk is not None:
                return (*qk, self._divisor(node.right, *qk))
        return None

    def _qk(self, node: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
        node = E.strip(node)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            left, right = node.left, node.right
        elif self.is_call_to(node, _MATMUL) and len(E.positional(node)) == 2:  # type: ignore[arg-type]
            left, right = (a.value for a in E.positional(node))  # type: ignore[arg-type]
        else:
            return None
        k = self._transposed(right)
        return (left, k) if k is not None else None

    @staticmethod
    def _transposed(node: cst.BaseExpression) -> cst.BaseExpression | None:
        node = E.strip(node)
        if isinstance(node, cst.Attribute) and node.attr.value == "mT":
            return node.value
        call = E.method_call(node, "transpose")
        if call is not None:
            dims = tuple(E.literal_int(a.value) for a in E.positional(call))
            if dims in _TRANSPOSES:
                return E.receiver(call)
        return None

    def _multiplier(self, factor: cst.BaseExpression, q: cst.BaseExpression, k: cst.BaseExpression) -> object:
        factor = E.strip(factor)
        if isinstance(factor, cst.BinaryOperation) and isinstance(factor.operator, cst.Divide):
            if E.close(E.const_value(factor.left), 1.0) and self._is_sqrt_head_dim(factor.right, q, k):
                return "default"
        if isinstance(factor, cst.BinaryOperation) and isinstance(factor.operator, cst.Power):
            if E.close(E.const_value(factor.right), -0.5) and self._is_head_dim(factor.left, q, k):
                return "default"
        return factor

    def _divisor(self, divisor: cst.BaseExpression, q: cst.BaseExpression, k: cst.BaseExpression) -> object:
        if self._is_sqrt_head_dim(divisor, q, k):
            return "default"
        divisor = E.strip(divisor)
        inner = code_of(divisor)
        if not isinstance(divisor, cst.Name | cst.Attribute | cst.Call | cst.Integer | cst.Float | cst.Subscript):
            inner = f"({inner})"
        return E.expr(f"1.0 / {inner}")

    def _is_sqrt_head_dim(self, node: cst.BaseExpression, q: cst.BaseExpression, k: cst.BaseExpression) -> bool:
        node = E.strip(node)
        if isinstance(node, cst.Call) and code_of(node.func) in _SQRT and len(node.args) == 1:
            return self._is_head_dim(node.args[0].value, q, k)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            return E.close(E.const_value(node.right), 0.5) and self._is_head_dim(node.left, q, k)
        return False

    @staticmethod
    def _is_head_dim(node: cst.BaseExpression, q: cst.BaseExpression, k: cst.BaseExpression) -> bool:
        """``q.size(-1)`` / ``k.shape[-1]``: the size the default scale uses."""
        node = E.strip(node)
        size = E.method_call(node, "size")
        if size is not None and len(size.args) == 1 and E.literal_int(size.args[0].value) == -1:
            base = E.receiver(size)
        elif (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute)
              and node.value.attr.value == "shape" and len(node.slice) == 1
              and isinstance(node.slice[0].slice, cst.Index)
              and E.literal_int(node.slice[0].slice.value) == -1):
            base = node.value.value
        else:
            return False
        return E.same(base, q) or E.same(base, k)

    def _separate_scale(self, statement: cst.BaseStatement, att: str) -> object | None:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if isinstance(small, cst.AugAssign) and code_of(small.target) == att:
                if isinstance(small.operator, cst.MultiplyAssign):
                    return E.strip(small.value)
                if isinstance(small.operator, cst.DivideAssign):
                    return E.expr(f"1.0 / ({code_of(E.strip(small.value))})")
        found = E.name_assign(statement)
        if found is None or found[0] != att:
            return None
        value = E.strip(found[1])
        if isinstance(value, cst.BinaryOperation) and code_of(E.strip(value.left)) == att:
            if isinstance(value.operator, cst.Multiply):
                return E.strip(value.right)
            if isinstance(value.operator, cst.Divide):
                return E.expr(f"1.0 / ({code_of(E.strip(value.right))})")
        return None

    # -- the mask ---------------------------------------------------------------

    def _mask(self, statement: cst.BaseStatement, att: str) -> tuple[str | None, str | None]:
        """(name of the masked scores, None) when ``statement`` applies a provably causal
        mask to ``att``; else (None, why not)."""
        call: cst.Call | None = None
        out: str | None = None
        found = E.name_assign(statement)
        if found is not None:
            call, out = E.method_call(found[1], "masked_fill"), found[0]
        elif (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
              and isinstance(statement.body[0], cst.Expr)):
            call, out = E.method_call(statement.body[0].value, "masked_fill_"), att
        if call is None or code_of(E.strip(E.receiver(call))) != att or len(E.positional(call)) != 2:
            return None, (f"`{att} = q @ kᵀ` is not followed by `{att}.masked_fill(mask, -inf)` "
                          "(not causal attention)")
        cond, fill = (a.value for a in E.positional(call))
        if not self._very_negative(fill):
            return None, f"the mask fills with `{code_of(fill)}`, not -inf"
        why = self._causal(cond)
        return (out, None) if why is None else (None, why)

    @staticmethod
    def _very_negative(node: cst.BaseExpression) -> bool:
        value = E.const_value(node)
        if value is not None:
            return value <= -1e4
        text = code_of(E.strip(node)).replace(" ", "")
        return "finfo(" in text and text.endswith(".min")

    def _causal(self, cond: cst.BaseExpression) -> str | None:
        cond = E.strip(cond)
        why = f"cannot prove the mask `{code_of(cond)}` is causal (expected torch.tril(torch.ones(...)) == 0)"
        if isinstance(cond, cst.Comparison) and len(cond.comparisons) == 1:
            target = cond.comparisons[0]
            zero = E.const_value(target.comparator) == 0.0 or code_of(target.comparator) == "False"
            one = E.const_value(target.comparator) == 1.0 or code_of(target.comparator) == "True"
            if isinstance(target.operator, cst.Equal):
                kind = self._derive(cond.left, 0)
                if (zero and kind == "tril") or (one and kind == "triu1"):
                    return None
            return why
        negated = None
        if isinstance(cond, cst.UnaryOperation) and isinstance(cond.operator, cst.BitInvert):
            negated = cond.expression
        elif E.method_call(cond, "logical_not") is not None:
            negated = E.receiver(E.method_call(cond, "logical_not"))  # type: ignore[arg-type]
        if negated is not None:
            return None if self._derive(negated, 0) == "tril" else why
        return None if self._derive(cond, 0) == "triu1" else why

    def _derive(self, node: cst.BaseExpression, depth: int, where: cst.FunctionDef | None = None) -> str | None:
        """``"tril"`` (ones on and below the diagonal), ``"triu1"`` (ones strictly above) or None."""
        if depth > 6:
            return None
        where = where if where is not None else self.function
        node = E.strip(node)
        if isinstance(node, cst.Subscript):
            return self._derive(node.value, depth + 1, where) if _top_left(node) else None
        if isinstance(node, cst.Call):
            if self.is_call_to(node, _TRIL) or E.method_call(node, "tril") is not None:
                return "tril" if self._ones_with_diagonal(node, 0, where) else None
            if self.is_call_to(node, _TRIU) or E.method_call(node, "triu") is not None:
                return "triu1" if self._ones_with_diagonal(node, 1, where) else None
            passing = E.method_call(node, *_PASS_THROUGH)
            if passing is not None:
                return self._derive(E.receiver(passing), depth + 1, where)
            return None
        if isinstance(node, cst.Name) and where is not None:
            values = _local_values(where, node.value)
            return self._derive(values[0], depth + 1, where) if len(values) == 1 else None
        if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
                and node.value.value == "self" and self.owner_class is not None):
            found = _attribute_values(self.owner_class, node.attr.value)
            if len(found) == 1:
                method, value = found[0]
                return self._derive(value, depth + 1, method)
        return None

    def _ones_with_diagonal(self, call: cst.Call, diagonal: int, where: cst.FunctionDef | None) -> bool:
        if isinstance(call.func, cst.Attribute) and not self.qualnames(call.func) & (_TRIL | _TRIU):
            source, diag = E.receiver(call), E.argument(call, 0, "diagonal")
        else:
            source, diag = E.argument(call, 0, "input"), E.argument(call, 1, "diagonal")
        given = 0 if diag is None else E.literal_int(diag)
        return given == diagonal and source is not None and self._is_ones(source, where, 0)

    def _is_ones(self, node: cst.BaseExpression, where: cst.FunctionDef | None, depth: int) -> bool:
        node = E.strip(node)
        if depth > 4:
            return False
        if isinstance(node, cst.Call):
            if self.is_call_to(node, _ONES):
                return True
            passing = E.method_call(node, *_PASS_THROUGH)
            return passing is not None and self._is_ones(E.receiver(passing), where, depth + 1)
        if isinstance(node, cst.Name) and where is not None:
            values = _local_values(where, node.value)
            return len(values) == 1 and self._is_ones(values[0], where, depth + 1)
        return False

    # -- softmax, dropout, output -----------------------------------------------

    def _softmax(self, statement: cst.BaseStatement, att: str) -> str | None:
        """The name bound to ``softmax(att, dim=-1)`` on this line, if it is that."""
        found = E.name_assign(statement)
        if found is None:
            return None
        value = E.strip(found[1])
        cast = E.method_call(value, "type_as", "to")  # softmax(att.float()).type_as(att)
        if cast is not None:
            value = E.strip(E.receiver(cast))
        if not isinstance(value, cst.Call):
            return None
        if self.is_call_to(value, _SOFTMAX):
            source, dim = E.argument(value, 0, "input"), E.argument(value, 1, "dim")
        elif E.method_call(value, "softmax") is not None:
            source, dim = E.receiver(value), E.argument(value, 0, "dim")
        else:
            return None
        if source is None or E.literal_int(dim) != -1:
            return None
        upcast = E.method_call(source, "float")
        if upcast is not None and not upcast.args:
            source = E.receiver(upcast)
        return found[0] if code_of(E.strip(source)) == att else None

    def _dropout(self, statement: cst.BaseStatement, att: str) -> tuple[cst.BaseExpression, str] | str | None:
        """(dropout_p expression, name bound) for a dropout of ``att`` on this line."""
        found = E.name_assign(statement)
        if found is None:
            return None
        out, value = found[0], E.strip(found[1])
        if not isinstance(value, cst.Call):
            return None
        if self.is_call_to(value, _DROPOUT):
            source = E.argument(value, 0, "input")
            if source is None or code_of(E.strip(source)) != att:
                return None
            p = E.argument(value, 1, "p") or cst.Float("0.5")
            training = E.argument(value, 2, "training")
            if training is None or E.literal_bool(training) is True:
                return p, out
            return E.expr(f"{code_of(p)} if {code_of(training)} else 0.0"), out
        if (isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Name)
                and value.func.value.value == "self" and len(value.args) == 1
                and code_of(E.strip(value.args[0].value)) == att and self.owner_class is not None):
            modules = _attribute_values(self.owner_class, value.func.attr.value)
            if (len(modules) == 1 and isinstance(modules[0][1], cst.Call)
                    and code_of(modules[0][1].func).endswith("Dropout")):
                return E.expr(f"{code_of(value.func)}.p if self.training else 0.0"), out
            return f"cannot tell what `{code_of(value.func)}` does to the attention weights"
        return None

    def _output(self, statement: cst.BaseStatement, att: str) -> tuple[cst.CSTNode, cst.BaseExpression] | None:
        """(target or the Return, v) for ``y = att @ v`` / ``return att @ v``."""
        found = E.simple_assign(statement)
        if found is None and isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                and isinstance(statement.body[0], cst.Return) and statement.body[0].value is not None:
            found = (statement.body[0], statement.body[0].value)  # type: ignore[assignment]
        if found is None:
            return None
        target, value = found
        value = E.strip(value)
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.MatrixMultiply):
            left, right = value.left, value.right
        elif self.is_call_to(value, _MATMUL) and len(E.positional(value)) == 2:  # type: ignore[arg-type]
            left, right = (a.value for a in E.positional(value))  # type: ignore[arg-type]
        else:
            return None
        if code_of(E.strip(left)) != att or att in E.names_in(right):
            return None
        return target, right


def _top_left(node: cst.Subscript) -> bool:
    """Slices like ``[:, :, :T, :T]`` / ``[None, ...]``: the top-left corner, as ``is_causal`` assumes."""
    for element in node.slice:
        part = element.slice
        if isinstance(part, cst.Slice):
            if part.lower is not None or part.step is not None:
                return False
        elif isinstance(part, cst.Index):
            if code_of(part.value) not in ("None", "..."):
                return False
        else:
            return False
    return True


def _local_values(function: cst.FunctionDef, name: str) -> list[cst.BaseExpression]:
    """Every value assigned to the plain name ``name`` inside ``function``."""
    values: list[cst.BaseExpression] = []
    for small in E.statements_in(function.body):
        if isinstance(small, cst.Assign):
            for target in small.targets:
                if isinstance(target.target, cst.Name) and target.target.value == name:
                    values.append(small.value)
                elif name in E.names_in(target.target) and not isinstance(target.target, cst.Attribute):
                    values.append(cst.Name("__unknown__"))  # bound by unpacking: unknowable
        elif isinstance(small, cst.AugAssign | cst.AnnAssign) and code_of(small.target) == name:
            values.append(cst.Name("__unknown__"))
    return values


def _attribute_values(cls: cst.ClassDef, attr: str) -> list[tuple[cst.FunctionDef, cst.BaseExpression]]:
    """``self.<attr> = value`` and ``self.register_buffer("<attr>", value)`` anywhere in ``cls``'s methods."""
    found: list[tuple[cst.FunctionDef, cst.BaseExpression]] = []
    for statement in cls.body.body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        for small in E.statements_in(statement.body):
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if code_of(target.target) == f"self.{attr}":
                        found.append((statement, small.value))
            elif isinstance(small, cst.Expr):
                call = E.method_call(small.value, "register_buffer")
                if call is not None and code_of(E.receiver(call)) == "self":
                    name = E.argument(call, 0, "name")
                    value = E.argument(call, 1, "tensor")
                    if (isinstance(name, cst.SimpleString) and name.evaluated_value == attr
                            and value is not None):
                        found.append((statement, value))
    return found
