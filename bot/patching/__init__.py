"""Code patches, the libcst side: replace a definition, run a registered codemod,
apply patch specs to a tree, and audit a changed tree against the contract's scope.

The engine describes patches (:mod:`infrarsi.patches`); everything that parses
or writes source lives here.
"""

from bot.patching.one_patch import apply_patch
from bot.patching.patch_set import apply_patches
from bot.patching.audit import AuditedChange, AuditResult, Violation, audit_tree, blob_id
from bot.patching.codemods import REGISTRY, describe, run_codemod
from bot.patching.replace import replace_definition
from bot.patching.results import Applied, Failed, NotApplicable, PatchResult

__all__ = [
    "REGISTRY",
    "Applied",
    "AuditResult",
    "AuditedChange",
    "Failed",
    "NotApplicable",
    "PatchResult",
    "Violation",
    "apply_patch",
    "apply_patches",
    "audit_tree",
    "blob_id",
    "describe",
    "replace_definition",
    "run_codemod",
]
