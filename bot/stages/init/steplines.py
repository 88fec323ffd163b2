"""Find the step line a training script prints, statically, and derive the regex that reads it.

Jobs print their own progress: f-strings, ``%`` and ``.format`` templates, ``logging``
calls (stderr), the dict lines ``transformers.Trainer`` prints, and progress bars
(tqdm, Lightning) that rewrite one line with ``\\r``. Each print-like call that
carries a loss is turned into a template (literal text and placeholders) and the
template into a regex with ``(?P<loss>)`` and, when the template has one,
``(?P<step>)``. Nothing here runs the script; :func:`regex_for_lines` derives a
regex from lines a dry run actually saw, for when the static guess was wrong.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import libcst as cst

NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
LOSS = rf"(?:tensor\()?(?P<loss>{NUM})"
STEP = r"(?P<step>\d+)"

Stream = Literal["stdout", "stderr"]

_STEP_EXPR = re.compile(r"^(?:\w+_)?(iter_num|iter|iters|step|steps|it|i|itr|iteration|n_iter|batch_idx|batch|"
                        r"batch_i|idx|update_idx|num_updates|step_count|completed_steps|step_num|iter_count)$")
EVAL_WORDS = re.compile(r"(?<![A-Za-z])(val|valid|validation|eval|evaluation|test|dev)(?![A-Za-z])", re.I)
_LOG_METHODS = {"info", "debug", "warning", "warn", "log", "critical", "success"}
_PRINT_NAMES = re.compile(r"(^|_)print(0|_rank_?0|_master|_once|_main)?$|^(master_print|rank0_print|log0|printr)$")
_PCT = re.compile(r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[hlL]?(?P<conv>[diouxXeEfFgGcrsa%])")
_BAR_COUNT = r"(?P<step>[1-9]\d*)(?:/\d+)?(?:it)?\s*\["  # a bar's 0/N paint is before any step
#: A call that evaluates (nanoGPT's estimate_loss, pytorch/examples' evaluate and validate, a CIFAR test).
_EVAL_CALL = re.compile(r"(^|_)(eval|evaluate|evaluation|validate|validation|estimate_loss|test)(_|$)", re.I)


@dataclass(frozen=True, kw_only=True, slots=True)
class Placeholder:
    expr: str  # the expression's source text


Part = str | Placeholder


@dataclass(frozen=True, kw_only=True, slots=True)
class StepLine:
    """A step line the entry point prints, and how to read it."""

    regex: str
    stream: Stream
    line: int  # where the call is in the source
    origin: str  # "f-string print", "logging", "HF Trainer", "Lightning progress bar", ...
    has_step: bool
    in_loop: bool
    every: int = 1  # printed under ``if <counter> % N == 0`` with a literal N: one line per N steps
    interval: str | None = None  # the N of ``if <counter> % N == 0`` when it is not a literal (``eval_interval``)
    evaluation: str | None = None  # an evaluation called before it in its branch (``estimate_loss``)


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalLine:
    """A line that prints a loss together with an evaluation's (``step 500: train loss 2.30, val loss 2.33``):
    never a step line, but it says how often, and after what, the job reports its training loss."""

    line: int
    every: int = 1
    interval: str | None = None
    evaluation: str | None = None


# --- templates -> regex --------------------------------------------------------------------------------------


def _meter(expr: str) -> str:
    """``losses_m.val`` is an AverageMeter's current value, not a validation loss."""
    return re.sub(r"\.(val|avg|sum|count)\b", "", expr)


def _role(expr: str) -> str | None:
    text = _meter(expr.strip())
    plain = re.sub(r"\s+", "", text)
    if re.search(r"loss", plain, re.I) and not EVAL_WORDS.search(plain):
        return "loss"
    leaf = [x for x in re.split(r"[.\[\]'\"()]+", re.sub(r"[+-]1$", "", plain)) if x]
    if leaf and _STEP_EXPR.match(leaf[-1]):
        return "step"
    if re.search(r"epoch", plain, re.I):
        return "epoch"
    return None


def _literal(text: str) -> str:
    out = []
    for chunk in re.split(r"(\s+)", text):
        if not chunk:
            continue
        out.append(r"\s+" if chunk.isspace() else re.escape(chunk))
    return "".join(out)


def template_regex(parts: list[Part]) -> tuple[str, bool] | None:
    """The regex of a template (None without a loss placeholder, or when the loss is an eval loss)."""
    roles = [(_role(p.expr) if isinstance(p, Placeholder) else None) for p in parts]
    if "loss" not in roles:
        return None
    if any(EVAL_WORDS.search(p if isinstance(p, str) else _meter(p.expr)) for p in parts):
        return None  # an evaluation line (or one that also reports an eval loss) is not a training step
    out: list[str] = []
    used: set[str] = set()
    last_group = 0
    for i, (part, role) in enumerate(zip(parts, roles)):
        if isinstance(part, str):
            out.append(_literal(part))
            continue
        if role in ("loss", "step", "epoch") and role not in used:
            used.add(role)
            last_group = i
            out.append(r"\s*" + {"loss": LOSS, "step": STEP, "epoch": rf"(?P<epoch>{NUM})"}[role])
        else:
            last = i == len(parts) - 1
            out.append(r".*" if last else r".*?")
    regex = "".join(out[: last_group + 1])  # what follows the last field only makes the regex brittle
    regex = regex.replace(r"\s+\s*", r"\s+")
    return regex, "step" in used


def _fstring_parts(node: cst.FormattedString, module: cst.Module) -> list[Part]:
    parts: list[Part] = []
    for p in node.parts:
        if isinstance(p, cst.FormattedStringText):
            parts.append(p.value.replace("{{", "{").replace("}}", "}"))
        elif isinstance(p, cst.FormattedStringExpression):
            parts.append(Placeholder(expr=module.code_for_node(p.expression)))
    return parts


def _format_parts(template: str, args: list[str], kwargs: dict[str, str]) -> list[Part] | None:
    parts: list[Part] = []
    auto = 0
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for literal, field, _spec, _conv in parsed:
        if literal:
            parts.append(literal)
        if field is None:
            continue
        head = re.split(r"[.\[]", field, maxsplit=1)[0]
        if head == "":
            expr = args[auto] if auto < len(args) else "?"
            auto += 1
        elif head.isdigit():
            expr = args[int(head)] if int(head) < len(args) else "?"
        else:
            expr = kwargs.get(head, head)
        parts.append(Placeholder(expr=expr + field[len(head):]))
    return parts


def _percent_parts(template: str, args: list[str]) -> list[Part]:
    parts: list[Part] = []
    pos = 0
    n = 0
    for m in _PCT.finditer(template):
        parts.append(template[pos:m.start()])
        pos = m.end()
        if m.group("conv") == "%":
            parts.append("%")
            continue
        expr = m.group("key") or (args[n] if n < len(args) else "?")
        n += 0 if m.group("key") else 1
        parts.append(Placeholder(expr=expr))
    parts.append(template[pos:])
    return [p for p in parts if p != ""]


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - a byte string or an odd literal is just not a template
            return None
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        left, right = _string_value(node.left), _string_value(node.right)
        return None if left is None or right is None else left + right
    return None


def expression_parts(node: cst.BaseExpression, module: cst.Module) -> list[Part] | None:
    """The template an expression renders to, when it is a string-building expression."""
    code = module.code_for_node
    if isinstance(node, cst.FormattedString):
        return _fstring_parts(node, module)
    if isinstance(node, cst.ConcatenatedString):
        left = expression_parts(node.left, module)  # type: ignore[arg-type]
        right = expression_parts(node.right, module)  # type: ignore[arg-type]
        return None if left is None or right is None else left + right
    value = _string_value(node)
    if value is not None:
        return [value]
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        template = _string_value(node.left)
        if template is None:
            return None
        right = node.right
        args = [code(e.value) for e in right.elements] if isinstance(right, cst.Tuple) else [code(right)]
        return _percent_parts(template, args)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        left, right = expression_parts(node.left, module), expression_parts(node.right, module)
        if left is None and right is None:
            return None
        return (left or [Placeholder(expr=code(node.left))]) + (right or [Placeholder(expr=code(node.right))])
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
        template = _string_value(node.func.value)
        if template is None:
            return None
        args = [code(a.value) for a in node.args if a.keyword is None and not a.star]
        kwargs = {a.keyword.value: code(a.value) for a in node.args if a.keyword is not None}
        return _format_parts(template, args, kwargs)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in ("str", "repr") \
            and node.args:
        return [Placeholder(expr=code(node.args[0].value))]
    return None


def _as_parts(node: cst.BaseExpression, module: cst.Module) -> list[Part]:
    return expression_parts(node, module) or [Placeholder(expr=module.code_for_node(node))]


# --- the visitor ---------------------------------------------------------------------------------------------


def _callee(func: cst.BaseExpression, module: cst.Module) -> tuple[str, str]:
    """(the receiver's source text, the called name)."""
    if isinstance(func, cst.Name):
        return "", func.value
    if isinstance(func, cst.Attribute):
        return module.code_for_node(func.value), func.attr.value
    return "", ""


def _divisors(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The N of every ``x % N == 0`` (or ``not x % N``) in a condition, either side of an ``and``/``or``."""
    if isinstance(test, cst.BooleanOperation):  # `... and batch > 0`, `... or iter == max_iters - 1`
        return _divisors(test.left) + _divisors(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Equal) \
            and isinstance(test.comparisons[0].comparator, cst.Integer) and test.comparisons[0].comparator.value == "0":
        test = test.left
    else:
        return []
    if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
        return [test.right]
    return []


def _literal_modulo(test: cst.BaseExpression) -> int:
    """N in ``x % N == 0`` or ``not x % N`` with N an integer literal (minGPT: ``trainer.iter_num % 10 == 0``)."""
    return max([max(1, int(d.value, 0)) for d in _divisors(test) if isinstance(d, cst.Integer)], default=1)


def modulo_name(test: cst.BaseExpression, module: cst.Module) -> str | None:
    """N in ``x % N == 0`` when N is not a literal: the interval variable a print is guarded by
    (``eval_interval``, ``args.log_interval``, ``VALIDATE_EVERY``)."""
    return next((module.code_for_node(d) for d in _divisors(test) if not isinstance(d, cst.Integer)), None)


class _Finder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (cst.metadata.PositionProvider,)

    def __init__(self, module: cst.Module, stdout_logging: bool, tqdm_stdout: bool) -> None:
        self.module = module
        self.found: list[StepLine] = []
        self.loops = 0
        self.every: list[int] = []  # per enclosing `if`: its literal modulo, else 1
        self.intervals: list[str | None] = []  # per enclosing `if`: its modulo when not a literal
        self.evals: list[list[str]] = [[]]  # per enclosing branch or loop body: the evaluations called so far
        self.eval_lines: list[EvalLine] = []
        self.stdout_logging = stdout_logging
        self.tqdm_stdout = tqdm_stdout

    def visit_For(self, node: cst.For) -> None:
        self.loops += 1
        self.evals.append([])

    def leave_For(self, node: cst.For) -> None:
        self.loops -= 1
        self.evals.pop()

    def visit_While(self, node: cst.While) -> None:
        self.loops += 1
        self.evals.append([])

    def visit_If(self, node: cst.If) -> None:
        self.every.append(_literal_modulo(node.test))
        self.intervals.append(modulo_name(node.test, self.module))
        self.evals.append([])

    def leave_If(self, node: cst.If) -> None:
        self.every.pop()
        self.intervals.pop()
        self.evals.pop()

    def leave_While(self, node: cst.While) -> None:
        self.loops -= 1
        self.evals.pop()

    def _cadence(self) -> tuple[int, str | None, str | None]:
        """(literal interval, interval variable, evaluation before it) of a print at this point."""
        every = next((n for n in reversed(self.every) if n > 1), 1)
        interval = next((n for n in reversed(self.intervals) if n), None)
        evaluation = self.evals[-1][-1] if self.evals[-1] else None
        return every, interval, evaluation

    def _add(self, node: cst.Call, parts: list[Part], stream: Stream, origin: str, *, bar: bool = False) -> None:
        made = template_regex(parts)
        line = self.get_metadata(cst.metadata.PositionProvider, node).start.line
        every, interval, evaluation = self._cadence()
        if made is None:
            texts = [p.expr if isinstance(p, Placeholder) else p for p in parts]
            if any("loss" in t.lower() for t in texts) and any(EVAL_WORDS.search(t) for t in texts):
                self.eval_lines.append(EvalLine(line=line, every=every, interval=interval,
                                                evaluation=evaluation or "an evaluation's loss on the same line"))
            return
        regex, has_step = made
        if bar and not has_step:
            regex, has_step = rf"{regex}.*?{_BAR_COUNT}", True
        self.found.append(StepLine(regex=regex, stream=stream, line=line, origin=origin, has_step=has_step,
                                   in_loop=self.loops > 0, every=every, interval=interval, evaluation=evaluation))

    def visit_Call(self, node: cst.Call) -> None:
        receiver, name = _callee(node.func, self.module)
        if _EVAL_CALL.search(name) and not receiver.endswith(("parser", "argparse")):
            self.evals[-1].append(name)
        positional = [a for a in node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        if _PRINT_NAMES.search(name) or (name == "write" and "tqdm" in receiver or name == "write" and "bar" in
                                         receiver.lower()):
            if not positional:
                return
            sep = _string_value(keywords["sep"]) if "sep" in keywords else " "
            parts: list[Part] = []
            for i, arg in enumerate(positional):
                if i:
                    parts.append(sep if sep is not None else " ")
                parts += _as_parts(arg.value, self.module)
            stream: Stream = "stderr" if "file" in keywords and "stderr" in self.module.code_for_node(
                keywords["file"]) else "stdout"
            self._add(node, parts, stream, "print")
        elif name in _LOG_METHODS and re.search(r"log", receiver, re.I) and positional:
            first = positional[1] if name == "log" and len(positional) > 1 else positional[0]
            rest = positional[positional.index(first) + 1:]
            template = _string_value(first.value)
            if template is not None and rest:
                parts = _percent_parts(template, [self.module.code_for_node(a.value) for a in rest])
            else:
                parts = _as_parts(first.value, self.module)
            is_loguru = "loguru" in receiver
            self._add(node, parts, "stdout" if self.stdout_logging and not is_loguru else "stderr", "logging")
        elif name == "set_postfix":
            stream = "stdout" if self.tqdm_stdout else "stderr"
            for key, value in keywords.items():
                if _role(key) == "loss" or _role(self.module.code_for_node(value)) == "loss" and key == "loss":
                    self.found.append(StepLine(
                        regex=rf"{_BAR_COUNT}[^\]]*?\b{re.escape(key)}=\s*{LOSS}", stream=stream,
                        line=self.get_metadata(cst.metadata.PositionProvider, node).start.line,
                        origin="tqdm postfix", has_step=True, in_loop=self.loops > 0))
                    break
            if positional and isinstance(positional[0].value, cst.Dict):
                for el in positional[0].value.elements:
                    key = _string_value(el.key) if isinstance(el, cst.DictElement) else None
                    if key and _role(key) == "loss":
                        self.found.append(StepLine(
                            regex=rf"{_BAR_COUNT}[^\]]*?\b{re.escape(key)}=\s*{LOSS}", stream=stream,
                            line=self.get_metadata(cst.metadata.PositionProvider, node).start.line,
                            origin="tqdm postfix", has_step=True, in_loop=self.loops > 0))
                        break
        elif name == "set_description" and positional:
            stream = "stdout" if self.tqdm_stdout else "stderr"
            self._add(node, _as_parts(positional[0].value, self.module), stream, "tqdm description", bar=True)
        elif name in ("log", "log_dict") and receiver == "self":
            self._lightning(node, positional, keywords)

    def _lightning(self, node: cst.Call, positional: list[cst.Arg], keywords: dict[str, cst.BaseExpression]) -> None:
        """``self.log("train_loss", loss, prog_bar=True)`` shows ``train_loss=…`` in Lightning's bar (stdout)."""
        prog = keywords.get("prog_bar")
        if not (isinstance(prog, cst.Name) and prog.value == "True"):
            return
        names: list[str] = []
        if positional and (key := _string_value(positional[0].value)) is not None:
            names.append(key)
        elif positional and isinstance(positional[0].value, cst.Dict):
            names += [k for el in positional[0].value.elements if isinstance(el, cst.DictElement)
                      and (k := _string_value(el.key)) is not None]
        for key in names:
            if _role(key) == "loss":
                on_epoch = keywords.get("on_epoch")
                suffix = "_step" if isinstance(on_epoch, cst.Name) and on_epoch.value == "True" else ""
                self.found.append(StepLine(
                    regex=rf"{_BAR_COUNT}[^\]]*?\b{re.escape(key + suffix)}=\s*{LOSS}", stream="stdout",
                    line=self.get_metadata(cst.metadata.PositionProvider, node).start.line,
                    origin="Lightning progress bar", has_step=True, in_loop=True))
                return


_HF_TRAINERS = re.compile(r"\b(Trainer|Seq2SeqTrainer|SFTTrainer|DPOTrainer|RewardTrainer)\s*\(")
HF_REGEX = rf"^\{{'loss': '?{LOSS}'?,.*'epoch': '?(?P<epoch>{NUM})'?"


def find_step_lines(source: str) -> list[StepLine]:
    """Every print-like call in ``source`` whose output carries a training loss, best first."""
    return _find(source)[0]


def find_eval_lines(source: str) -> list[EvalLine]:
    """Every print-like call in ``source`` that prints a loss beside an evaluation's (no step line), in order."""
    return _find(source)[1]


def _find(source: str) -> tuple[list[StepLine], list[EvalLine]]:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return [], []
    # Hydra's default job logging, and handlers bound to sys.stdout, put logging lines on stdout
    stdout_logging = bool(re.search(r"basicConfig\([^)]*stream\s*=\s*sys\.stdout|StreamHandler\(\s*sys\.stdout|"
                                    r"hydra\.main", source))
    tqdm_stdout = bool(re.search(r"tqdm\([^)]*file\s*=\s*sys\.stdout", source, re.S))
    finder = _Finder(module, stdout_logging, tqdm_stdout)
    cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).visit(finder)
    found = list(finder.found)
    if _HF_TRAINERS.search(source) and re.search(r"from\s+(transformers|trl)\b|import\s+transformers", source):
        found.append(StepLine(regex=HF_REGEX, stream="stdout", line=0, origin="HF Trainer log dict",
                              has_step=False, in_loop=True))
    found.sort(key=lambda s: (not s.in_loop, not s.has_step, s.origin == "HF Trainer log dict"))
    return found, finder.eval_lines


# --- from lines a run printed ----------------------------------------------------------------------------------

_TOKEN = re.compile(NUM.replace("[-+]?", "(?<![\\w.])[-+]?") + r"(?![\w.])")
_LOSS_WORD = re.compile(r"(?<![A-Za-z])(?:train[_ ]?)?loss(?![A-Za-z])", re.I)


def _shape(line: str) -> str:
    return _TOKEN.sub("#", line).strip()


def regex_for_lines(lines: list[str]) -> str | None:
    """A regex matching the most frequent loss-carrying line shape in ``lines`` (None when there is none).

    The number after the first ``loss`` word (not an eval loss) is the loss; the
    first integer before it that follows a step-like word (or an ``N/M`` count)
    is the step. Other numbers may vary; other text must stay as it is.
    """
    candidates = [ln for ln in lines if _LOSS_WORD.search(ln) and not EVAL_WORDS.search(
        ln[: _LOSS_WORD.search(ln).start()])]  # type: ignore[union-attr]
    if not candidates:
        return None
    shapes = Counter(_shape(ln) for ln in candidates)
    shape, count = shapes.most_common(1)[0]
    if count < 2:
        return None
    line = next(ln for ln in candidates if _shape(ln) == shape).strip()
    loss_word = _LOSS_WORD.search(line)
    assert loss_word is not None
    tokens = list(_TOKEN.finditer(line))
    loss_tok = next((t for t in tokens if t.start() >= loss_word.end()), None)
    if loss_tok is None:
        return None
    step_tok = None
    for t in tokens:
        if t.start() >= loss_tok.start():
            break
        before = line[max(0, t.start() - 12): t.start()].lower()
        after = line[t.end(): t.end() + 1]
        if re.fullmatch(r"\d+", t.group()) and (re.search(r"(step|iter|it|batch|update)\w*\W*$", before)
                                               or after == "/"):
            step_tok = t
            break
    out: list[str] = []
    pos = 0
    for t in tokens:
        out.append(_literal(line[pos:t.start()]))
        if t is loss_tok:
            out.append(rf"(?P<loss>{NUM})")
        elif t is step_tok:
            out.append(STEP)
        else:
            out.append(NUM)
        pos = t.end()
        if t is loss_tok:
            break
    return "".join(out)
