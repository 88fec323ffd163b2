"""Step lines printed by the metric meters that public training code copies from PyTorch's own examples.

Two families print a training step's loss with no format string at the call site, so the print-call
reading of :mod:`steplines` cannot see them:

- pytorch/examples' imagenet ``ProgressMeter`` and ``AverageMeter`` (copied into MoCo, SimCLR,
  SupContrast and many more). ``progress.display(i + 1)`` prints
  ``Epoch: [0][ 11/5005]\\tTime  0.412 ( 0.437)\\t...\\tLoss 6.9078e+00 (6.9163e+00)\\t...``: the meter's
  name as given to ``AverageMeter('Loss', ':.4e')``, then its current value.
- torchvision's classification references' ``MetricLogger`` (DeiT, MAE, DINO, ConvNeXt, BEiT).
  ``for x in metric_logger.log_every(loader, print_freq, header)`` prints
  ``Epoch: [0]  [  10/5004]  eta: 0:41:12  lr: 0.000100  loss: 6.9078 (6.9163)  time: ...`` for what
  ``metric_logger.update(loss=...)`` records; the first number is the median of a short window, the
  same statistic for every candidate.

Each regex is anchored on the training meter's prefix (``Epoch: [N]``) when the code gives one, so the
evaluation lines the same meters print (``Test: [ 1/196] ... Loss ...``) are not read as steps.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from bot.stages.init.steplines import EVAL_WORDS, LOSS, STEP, StepLine

_LOSS_NAME = re.compile(r"(?<![A-Za-z])(?:train[_ ]?)?loss(?![A-Za-z])", re.I)
_COUNT = rf"\[\s*{STEP}/\d+\]"  # `[ 11/5005]`: the batch count both meters print


def _text(node: cst.BaseExpression) -> str | None:
    """A template's literal text with ``{}`` where values go: a string, ``'...'.format(...)``, an f-string."""
    if isinstance(node, cst.SimpleString):
        return str(node.evaluated_value)
    if isinstance(node, cst.FormattedString):
        return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)
    if m.matches(node, m.Call(func=m.Attribute(value=m.SimpleString(), attr=m.Name("format")))):
        return re.sub(r"\{[^{}]*\}", "{}", str(node.func.value.evaluated_value))  # type: ignore[attr-defined]
    return None


def _prefix_regex(template: str | None) -> str:
    """``Epoch: [{}]`` → a regex for the line's start; no anchor without a template."""
    if not template or not template.strip():
        return ""
    pieces = [re.escape(t) for t in template.split("{}")]
    return "^" + r"\S+".join(pieces).replace(r"\ ", r"\s+")


class _Meters(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.loss_meter: str | None = None  # AverageMeter('Loss', ...)
        self.progress_prefixes: list[str | None] = []  # ProgressMeter(..., prefix=...) of training
        self.display_line = 0
        self.log_every: list[tuple[int, int, str | None]] = []  # (line, a literal print_freq or 1, header text)
        self.logger_loss: str | None = None  # metric_logger.update(loss=...)
        self.assigned: dict[str, cst.BaseExpression] = {}  # name = <expr>, the last seen

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.assigned[target.target.value] = node.value

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
        line = self.get_metadata(PositionProvider, node).start.line
        if name == "AverageMeter" and node.args and isinstance(node.args[0].value, cst.SimpleString):
            label = str(node.args[0].value.evaluated_value)
            if _LOSS_NAME.fullmatch(label) and self.loss_meter is None:
                self.loss_meter = label
        elif name == "ProgressMeter":
            positional = [a.value for a in node.args if a.keyword is None]
            prefix = next((a.value for a in node.args if a.keyword and a.keyword.value == "prefix"),
                          positional[2] if len(positional) > 2 else None)  # ProgressMeter(n, meters, prefix)
            text = self._template(prefix) if prefix is not None else None
            if not (text and EVAL_WORDS.search(text)):
                self.progress_prefixes.append(text)
        elif name == "display" and isinstance(func, cst.Attribute) and not self.display_line:
            self.display_line = line
        elif name == "log_every" and isinstance(func, cst.Attribute):
            # resolved here: `header` is reassigned further down for the evaluation loop
            args = list(node.args)
            header = self._template(args[2].value) if len(args) > 2 else None
            self.log_every.append((line, self._every(args[1] if len(args) > 1 else None), header))
        elif name == "update" and isinstance(func, cst.Attribute):
            for a in node.args:
                if a.keyword and _LOSS_NAME.fullmatch(a.keyword.value) and self.logger_loss is None:
                    self.logger_loss = a.keyword.value

    def _template(self, node: cst.BaseExpression) -> str | None:
        if isinstance(node, cst.Name) and node.value in self.assigned:
            node = self.assigned[node.value]
        return _text(node)

    def _every(self, arg: cst.Arg | None) -> int:
        value = arg.value if arg is not None else None
        if isinstance(value, cst.Name) and value.value in self.assigned:
            value = self.assigned[value.value]
        return int(value.value, 0) if isinstance(value, cst.Integer) else 1


def meter_step_lines(source: str) -> list[StepLine]:
    """The step lines of the ProgressMeter and MetricLogger conventions in ``source`` (a file of the job)."""
    if "AverageMeter" not in source and "log_every" not in source:
        return []
    try:
        wrapper = MetadataWrapper(cst.parse_module(source), unsafe_skip_copy=True)
    except cst.ParserSyntaxError:
        return []
    meters = _Meters()
    wrapper.visit(meters)
    found: list[StepLine] = []
    if meters.loss_meter and meters.progress_prefixes and meters.display_line:
        prefix = _prefix_regex(meters.progress_prefixes[0])
        regex = (rf"{prefix}.*?{_COUNT}.*?(?<![A-Za-z]){re.escape(meters.loss_meter)}\s+{LOSS}")
        found.append(StepLine(regex=regex, stream="stdout", line=meters.display_line,
                              origin="ProgressMeter display", has_step=True, in_loop=True))
    if meters.logger_loss:
        for line, every, text in meters.log_every:
            if text and EVAL_WORDS.search(text):
                continue
            regex = rf"{_prefix_regex(text)}.*?{_COUNT}.*?(?<![A-Za-z]){re.escape(meters.logger_loss)}:\s+{LOSS}"
            found.append(StepLine(regex=regex, stream="stdout", line=line, origin="MetricLogger.log_every",
                                  has_step=True, in_loop=True, every=every))
            break
    return found
