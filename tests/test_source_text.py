"""infrarsi.source_text: a Python file read and written back in the encoding its coding line declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.source_text import decode_source, encode_source, read_source


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252", "utf-8"])
def test_a_coding_line_names_the_encoding_both_ways(tmp_path: Path, encoding: str) -> None:
    text = f"# -*- coding: {encoding} -*-\n# modèle: café\nx = 'é'\n"
    path = tmp_path / "model.py"
    path.write_bytes(text.encode(encoding))
    assert read_source(path) == text
    assert encode_source(text) == text.encode(encoding)


def test_utf8_is_the_default_and_a_bom_is_dropped() -> None:
    assert decode_source("x = 'é'\n".encode()) == "x = 'é'\n"
    assert decode_source(b"\xef\xbb\xbfx = 1\n") == "x = 1\n"
    assert encode_source("x = 'é'\n") == "x = 'é'\n".encode()


def test_what_cannot_be_decoded_is_a_unicode_error() -> None:
    with pytest.raises(UnicodeError):
        decode_source("x = 'é'\n".encode("latin-1"))  # no coding line: UTF-8, and this is not
    with pytest.raises(UnicodeError):
        decode_source(b"# coding: no-such-codec\nx = 1\n")
