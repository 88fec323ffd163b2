"""`infrarsi report --png`: the charts as PNG files with matplotlib; a clear error without it."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from bot.stages.report.png import PngError, write_pngs
from tests.support.reports import sample_report


def test_the_three_charts_are_written_as_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = write_pngs(sample_report(failed=3, memory_limit_bytes=2**30), tmp_path / "charts")
    assert [p.name for p in paths] == ["step_time.png", "verification.png", "memory.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5_000


def test_without_matplotlib_it_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".")[0] == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PngError, match=r"pip install 'infrarsi\[png\]'") as err:
        write_pngs(sample_report(), tmp_path)
    assert err.value.exit_code == 2 and not list(tmp_path.iterdir())
