"""Stage 4, report: report.md and report.json of a finished run."""
