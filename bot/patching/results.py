"""What applying one patch came to, as a value: applied, not applicable here, or failed.

Modelled on libcst's ``TransformSuccess | TransformSkip | TransformFailure``:
the caller (the search loop) must handle every outcome, and nothing raises
across this boundary, so one bad patch cannot take down a search.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Applied:
    """The patch was written. ``added_imports`` lists the import statements it had to add,
    per file (``"train.py: import torch"``), so the scope audit can refuse them when the
    contract does; ``symbols`` are the definitions it edited (``"model.py::GPT.forward"``,
    ``"train.py::<module>"`` for module-level code)."""

    patch_id: str
    changed_files: tuple[str, ...]
    added_imports: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class NotApplicable:
    """The patch does not fit this tree (pattern absent, symbol missing, requirement unmet).

    Not an error: the search just drops the candidate. Nothing was written.
    """

    patch_id: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Failed:
    """The patch is broken (replacement does not parse, codemod crashed). Nothing was written."""

    patch_id: str
    error: str


PatchResult = Applied | NotApplicable | Failed


# Per-file outcomes: what a codemod or a replacement did to one file's text.
# ``apply`` turns them into one PatchResult per patch (and only then writes).


@dataclass(frozen=True, kw_only=True, slots=True)
class Rewritten:
    """New source for one file, the symbols edited in it and the imports it had to add."""

    code: str
    symbols: tuple[str, ...] = ()
    added_imports: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Declined:
    """The file does not contain what the patch needs; ``reason`` says what was missing."""

    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Broken:
    """The patch itself (or the file) could not be processed; ``error`` says why."""

    error: str


FileOutcome = Rewritten | Declined | Broken
