"""Samples per step from a batch size written into the training ``DataLoader`` call.

Small classification repos (kuangliu/pytorch-cifar's ``main.py``:
``trainloader = torch.utils.data.DataLoader(trainset, batch_size=128, shuffle=True)``)
have no batch setting at all: the batch is a literal of the loader. It is the
global batch (fixed, part of the task); each sample counts as one token, as for
any job without a sequence length.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from infrarsi.seams.proposer import RepoSummary
from infrarsi.source_text import read_source

_LOADER = m.Call(func=m.Name("DataLoader") | m.Attribute(attr=m.Name("DataLoader")))


class _Loaders(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.found: list[tuple[int, int, str, bool]] = []  # (batch, line, assigned name, shuffle=True)
        self._target = ""

    def visit_Assign(self, node: cst.Assign) -> None:
        first = node.targets[0].target
        self._target = first.value if isinstance(first, cst.Name) else ""

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._target = ""

    def visit_Call(self, node: cst.Call) -> None:
        if not m.matches(node, _LOADER):
            return
        kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        batch = kw.get("batch_size")
        if not isinstance(batch, cst.Integer):
            return
        shuffle = isinstance(kw.get("shuffle"), cst.Name) and kw["shuffle"].value == "True"  # type: ignore[union-attr]
        self.found.append((int(batch.value, 0), self.get_metadata(PositionProvider, node).start.line,
                           self._target, shuffle))


def loader_batch(summary: RepoSummary) -> tuple[int, str] | None:
    """(samples per step, note) from the entry script's training DataLoader, or None."""
    if summary.entry is None:
        return None
    try:
        module = cst.parse_module(read_source(summary.root / summary.entry))
    except (OSError, UnicodeError, cst.ParserSyntaxError):
        return None
    loaders = _Loaders()
    MetadataWrapper(module, unsafe_skip_copy=True).visit(loaders)
    # the training loader: named so, or the one that shuffles; not the test loader beside it
    ranked = sorted(loaders.found, key=lambda f: ("train" not in f[2].lower(), not f[3], f[1]))
    if not ranked or not (("train" in ranked[0][2].lower()) or ranked[0][3] or len(ranked) == 1):
        return None
    batch, line, _, _ = ranked[0]
    return batch, (f"guessed: batch_size={batch} of the training DataLoader (line {line} of {summary.entry}), "
                   "samples (no batch setting or sequence length found: each sample counts as one token)")
