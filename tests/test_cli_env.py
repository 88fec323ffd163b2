"""bot.cli.env: ``infrarsi env`` prints what a bug report needs and never a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.cli.env import environment_lines
from tests.support.cli_driver import run_cli


def test_the_report_names_versions_hardware_and_the_executor(tiny_repo: Path) -> None:
    result = run_cli(["env", str(tiny_repo)])
    assert result.code == 0 and result.err == ""
    assert result.out.startswith("Copy-and-paste the text below in your bug report.\n\n- infrarsi: ")
    keys = [line.split(":", 1)[0] for line in result.out.splitlines()[2:]]
    for key in ("- infrarsi", "- Python", "- platform", "- torch", "- CPU", "- packages", "- executor", "- bank",
                "- environment"):
        assert key in keys, key
    assert "- executor: local (the contract's [launch]; world_size 1, ranks_per_node 1)" in result.out


def test_without_a_contract_the_executor_is_the_default(tmp_path: Path) -> None:
    line = next(x for x in environment_lines(tmp_path) if x.startswith("- executor"))
    assert line.startswith("- executor: local, the default (no readable contract in")


def test_a_token_is_named_never_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_value")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    text = "\n".join(environment_lines(tmp_path))
    assert "ghp_secret_value" not in text
    assert "GITHUB_TOKEN set" in text and "OMP_NUM_THREADS=3" in text
