"""bot.cli.common: the REPO argument, ``--run-id`` and its deprecated spelling, byte sizes, progress lines, and the
argparse types that check each number and name where it is parsed."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bot.cli.common import (UsageError, add_deprecated_alias, add_repo_argument, add_run_id_argument, fmt_bytes,
                            infrarsi_version, int_at_least, memory_size, positive_float, repo_dir, resolve_repo,
                            run_id, say)


def test_a_deprecated_alias_stores_like_its_replacement_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    add_run_id_argument(p, "the run", deprecated_run=True)
    assert p.parse_args(["--run-id", "r1"]).run_id == "r1"
    assert capsys.readouterr().err == ""
    assert p.parse_args(["--run", "r2"]).run_id == "r2"
    assert capsys.readouterr().err == "note: --run is deprecated; use --run-id\n"
    assert "--run " not in p.format_help()  # hidden from --help


def test_a_hidden_alias_leaves_its_dest_unset_when_absent() -> None:
    p = argparse.ArgumentParser()
    add_deprecated_alias(p, "--repo", dest="repo_option", replacement="REPO")
    assert not hasattr(p.parse_args([]), "repo_option")


def test_repo_is_positional_or_defaults_to_the_current_directory() -> None:
    p = argparse.ArgumentParser()
    add_repo_argument(p, optional=True)
    add_deprecated_alias(p, "--repo", dest="repo_option", replacement="REPO")
    assert resolve_repo(p.parse_args([])) == "."
    assert resolve_repo(p.parse_args(["here"])) == "here"
    assert resolve_repo(p.parse_args(["--repo", "old"])) == "old"
    required = argparse.ArgumentParser()
    add_repo_argument(required)
    with pytest.raises(SystemExit):
        required.parse_args([])


def test_repo_dir_is_an_existing_directory_or_a_usage_error(tmp_path: Path) -> None:
    assert repo_dir(str(tmp_path)) == tmp_path.resolve()
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError) as caught:
        repo_dir(str(tmp_path / "file"))
    assert str(caught.value) == f"{tmp_path / 'file'}: not a directory (REPO is the training repository)"
    assert caught.value.exit_code == 2


def test_bytes_are_shown_in_mebibytes() -> None:
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(0) == "0 MiB"
    assert fmt_bytes(3 * 2**20 + 1) == "3 MiB"


def test_progress_goes_to_stderr_unless_json(capsys: pytest.CaptureFixture[str]) -> None:
    say(argparse.Namespace(json=False))("baseline 1/5")
    say(argparse.Namespace())("no json flag")
    say(argparse.Namespace(json=True))("quiet")
    out, err = capsys.readouterr()
    assert (out, err) == ("", "  baseline 1/5\n  no json flag\n")


@pytest.mark.parametrize(("parse", "text", "says"), [
    (int_at_least(1), "0", "expected an integer >= 1, got 0"),
    (int_at_least(2), "x", "expected an integer >= 2, got 'x'"),
    (positive_float, "-1", "expected a finite number > 0, got -1"),
    (positive_float, "inf", "expected a finite number > 0, got inf"),
    (positive_float, "soon", "expected a number > 0, got 'soon'"),
    (memory_size, "0GiB", "expected a size > 0 in bytes or like 6GiB or 512MB, got '0GiB'"),
    (run_id, "a b", "invalid run id 'a b'"),
    (run_id, "..", "invalid run id '..'"),
])
def test_a_bad_value_names_itself_and_the_allowed_range(parse: object, text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(text)  # type: ignore[operator]
    assert says in str(caught.value)


def test_good_values_parse() -> None:
    assert int_at_least(1)("3") == 3 and positive_float("0.5") == 0.5
    assert memory_size("1KB") == 1000 and memory_size("2GiB") == 2 * 2**30
    assert run_id("r1.promote_2-b") == "r1.promote_2-b"


def test_the_version_is_the_installed_package_s() -> None:
    assert infrarsi_version()[0].isdigit()
