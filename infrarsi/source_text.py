"""A Python file's text as the interpreter reads it, in any encoding PEP 263 allows.

A coding line (``# -*- coding: latin-1 -*-``) or a UTF-8 byte-order mark names the encoding, else it is UTF-8
(:func:`tokenize.detect_encoding`, the rule libcst applies to bytes too). Every reader of the user's Python
sources decodes here, so a model file in latin-1 is in the editable scope like any other, and a patched file is
written back in the encoding it declares (:func:`encode_source`).
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

__all__ = ["decode_source", "encode_source", "read_source"]


def _encoding(raw: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as e:  # an unknown codec, or a coding line that contradicts a BOM
        raise UnicodeError(str(e)) from None
    return encoding


def decode_source(raw: bytes) -> str:
    """``raw`` decoded as its coding line says (a BOM dropped); ``UnicodeError`` when it cannot be."""
    return raw.decode(_encoding(raw))


def read_source(path: Path) -> str:
    """The text of the Python file at ``path`` (:func:`decode_source`)."""
    return decode_source(path.read_bytes())


def encode_source(text: str) -> bytes:
    """``text`` encoded as its own coding line declares (UTF-8 without one); the inverse of :func:`decode_source`
    for a file written back."""
    head = "".join(text.splitlines(keepends=True)[:2]).encode("ascii", "replace")
    encoding = _encoding(head)
    return text.encode("utf-8" if encoding == "utf-8-sig" else encoding)
