"""The report and apply stages' commands, registered by ``bot.cli``: report, apply, approve, promote."""

from __future__ import annotations

import argparse

from bot.apply import add_apply_parser
from bot.promote import add_approve_parser, add_promote_parser
from bot.report import add_report_parser

__all__ = ["add_stage5_parsers"]


def add_stage5_parsers(sub: argparse._SubParsersAction) -> None:
    add_report_parser(sub)
    add_apply_parser(sub)
    add_promote_parser(sub)
    add_approve_parser(sub)
