"""The ``infrarsi`` command line."""

from bot.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
