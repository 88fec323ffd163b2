"""The report stage's engine side: one record from the journal, rendered as report.md, report.json and a PR body."""

from infrarsi.report.model import (
    CalibrationRow,
    Invariant,
    KnobChange,
    PatchChange,
    Report,
    RepoFacts,
    SourceChange,
    TrialRow,
    Verification,
    build_report,
    command_line,
)
from infrarsi.report.render import (
    GITHUB_BODY_LIMIT,
    SECTIONS,
    body_changed,
    parse_marker,
    pr_title,
    render_markdown,
    render_pr_body,
)

__all__ = [
    "GITHUB_BODY_LIMIT",
    "SECTIONS",
    "CalibrationRow",
    "Invariant",
    "KnobChange",
    "PatchChange",
    "RepoFacts",
    "Report",
    "SourceChange",
    "TrialRow",
    "Verification",
    "body_changed",
    "build_report",
    "command_line",
    "parse_marker",
    "pr_title",
    "render_markdown",
    "render_pr_body",
]
