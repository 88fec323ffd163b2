"""Replace one definition in a file with new source, leaving every other byte as it was.

A replacement patch (written by a person or a model) is the full text of one
function or class. libcst round-trips source exactly, so swapping one node of
the tree and printing it back changes the definition and nothing else: the
diff a reviewer sees is the patch, and the scope audit finds exactly one
changed symbol. The replacement may be given at any indentation; it takes the
nesting level of the definition it replaces and the file's indent unit.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from bot.patching.results import Broken, Declined, FileOutcome, Rewritten
from bot.patching.symbols import Definition, definitions


def parse_replacement(replacement: str) -> Definition | Broken:
    """The single function or class definition in ``replacement``, or why it is not one."""
    try:
        module = cst.parse_module(textwrap.dedent(replacement))
    except cst.ParserSyntaxError as e:
        return Broken(error=f"replacement does not parse: {_one_line(e)}")
    statements = module.body
    if len(statements) != 1 or not isinstance(statements[0], cst.FunctionDef | cst.ClassDef):
        kinds = ", ".join(type(s).__name__ for s in statements) or "nothing"
        return Broken(error=f"replacement must be exactly one function or class definition, got {kinds}")
    node = statements[0]
    # Comments above the definition parse into the module header; keep them with it.
    comments = [line for line in module.header if line.comment is not None]
    return node.with_changes(leading_lines=[*comments, *node.leading_lines])


def replace_definition(source: str, qualname: str, replacement: str) -> FileOutcome:
    """``source`` with the definition named ``qualname`` swapped for ``replacement``.

    Declined when the file has no (or more than one) definition of that name;
    Broken when the replacement is not a single definition of that same name and
    kind, or the file itself does not parse.
    """
    new = parse_replacement(replacement)
    if isinstance(new, Broken):
        return new
    name = qualname.rsplit(".", 1)[-1]
    if new.name.value != name:
        return Broken(error=f"replacement defines {new.name.value!r} but the target is {qualname!r}; "
                            "a replacement must keep the name its callers use")
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        return Broken(error=f"target file does not parse: {_one_line(e)}")
    found = definitions(module).get(qualname, [])
    if not found:
        return Declined(reason=f"no definition named {qualname!r} in this file")
    if len(found) > 1:
        return Declined(reason=f"{qualname!r} is defined {len(found)} times in this file; "
                               "a replacement needs exactly one")
    old = found[0]
    if type(old) is not type(new):
        return Broken(error=f"{qualname!r} is a {_kind(old)} but the replacement is a {_kind(new)}")
    placed = new.with_changes(leading_lines=[*old.leading_lines, *new.leading_lines])
    updated = module.visit(_Swap(old, placed))
    return Rewritten(code=updated.code, symbols=(qualname,))


class _Swap(cst.CSTTransformer):
    """Put ``new`` where ``old`` (found by identity) is; leave everything else untouched."""

    def __init__(self, old: Definition, new: Definition) -> None:
        self.old = old
        self.new = new

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node is not self.old  # nothing inside the old definition needs visiting

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        return self.new if original_node is self.old else updated_node


def _kind(node: Definition) -> str:
    return "class" if isinstance(node, cst.ClassDef) else "function"


def _one_line(error: Exception) -> str:
    text = str(error).strip()
    return " ".join(part.strip() for part in text.splitlines() if part.strip())
