"""Sections of ``docs/BENCHMARKS.md`` that different benchmark scripts generate, kept apart.

``benchmarks/search.py`` writes the page; other scripts (``engine_cost``,
``search_table``) own one section each, delimited by HTML comments
``<!-- begin NAME -->`` / ``<!-- end NAME -->``. Each script replaces its own
section (appending it the first time) and leaves the rest of the page alone,
and the page's writer carries the marked sections over when it rewrites it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- begin {re.escape(name)} -->\n.*?<!-- end {re.escape(name)} -->\n?", re.S)


def block(name: str, body: str) -> str:
    """``body`` wrapped in the markers of section ``name``."""
    return f"<!-- begin {name} -->\n{body.rstrip()}\n<!-- end {name} -->\n"


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with section ``name`` replaced by ``body``, or with it appended if absent."""
    new = block(name, body)
    pattern = _pattern(name)
    if pattern.search(text):
        return pattern.sub(lambda _: new, text, count=1)
    return text.rstrip("\n") + "\n\n" + new


def marked_sections(text: str) -> dict[str, str]:
    """Every marked section of ``text``, by name, markers included."""
    return {m.group(1): m.group(0) if m.group(0).endswith("\n") else m.group(0) + "\n"
            for m in re.finditer(r"<!-- begin (.+?) -->\n.*?<!-- end \1 -->\n?", text, re.S)}


def keep_marked(old: str, new: str) -> str:
    """``new`` plus the marked sections of ``old`` that ``new`` does not have (a page rewritten by its
    writer keeps what other scripts put in it)."""
    have = marked_sections(new)
    out = new
    for name, section in marked_sections(old).items():
        if name not in have:
            out = out.rstrip("\n") + "\n\n" + section
    return out


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) section ``name`` of the page at ``path``, creating the page if needed."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(replace_section(text, name, body), encoding="utf-8")


def publish(text: str, *, section: str, page: Path | None, raw: Path | None, payload: dict[str, Any]) -> None:
    """A benchmark's output: ``text`` printed, ``payload`` as JSON at ``raw``, ``text`` as ``section`` of ``page``
    (either skipped when None)."""
    print(text)
    if raw is not None:
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps(payload) + "\n", encoding="utf-8")
    if page is not None:
        write_section(page, section, text)
        print(f"wrote the section to {page}", file=sys.stderr)


def recorded_command(module: str, argv: Sequence[str] | None) -> str:
    """The command line a measurement records: as really run, with its niceness (a timed run at ``nice -n 19``
    shares its cores with everything else, and whoever reads the figures should know)."""
    niceness = os.nice(0)
    args = " ".join(argv if argv is not None else sys.argv[1:])
    return f"{f'nice -n {niceness} ' if niceness else ''}.venv/bin/python -m {module} {args}".strip()
