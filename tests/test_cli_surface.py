"""The CLI surface is pinned (as torchtitan pins its config flags): every verb, flag and exit status.

``tests/cli_surface.json`` is ``build_parser()`` walked recursively plus the
exit status of every error class. A change to it must be on purpose: rerun with
``INFRARSI_UPDATE_CLI_SURFACE=1`` to rewrite the file, and say so in README's
command table (and keep an old flag working as a hidden alias,
``bot.cli.common.add_deprecated_alias``, so users' scripts do not break).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import bot
import infrarsi
from bot.cli import build_parser
from infrarsi.errors import BAD_INPUT, NOT_RIGHT, TRANSIENT, InfraRSIError

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path(__file__).with_name("cli_surface.json")
UPDATE = "INFRARSI_UPDATE_CLI_SURFACE"


def _default(value: Any) -> Any:
    if value is argparse.SUPPRESS:
        return "(suppressed)"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _action(a: argparse.Action) -> dict[str, Any]:
    return {"flags": list(a.option_strings) or None, "dest": a.dest, "kind": type(a).__name__.lstrip("_"),
            "nargs": a.nargs, "default": _default(a.default), "required": a.required,
            "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
            "type": getattr(a.type, "__name__", None), "metavar": a.metavar, "hidden": a.help == argparse.SUPPRESS}


def walk(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """A parser as data: its arguments, and each sub-verb walked the same way."""
    out: dict[str, Any] = {"arguments": [], "verbs": {}}
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            out["verbs"] = {name: walk(p) for name, p in a.choices.items()}
            out["verb_required"] = a.required
            continue
        out["arguments"].append(_action(a))
    return out


def _import_everything() -> None:
    for pkg in (bot, infrarsi):
        for module in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)


def _subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def exit_codes() -> dict[str, int]:
    _import_everything()
    # The product's errors only: a benchmark or test module imported earlier in the session may define its own.
    return {f"{c.__module__}.{c.__qualname__}": c.exit_code for c in _subclasses(InfraRSIError)
            if c.__module__.split(".")[0] in ("bot", "infrarsi")}


def surface() -> dict[str, Any]:
    return {"parser": walk(build_parser()), "exit_codes": dict(sorted(exit_codes().items()))}


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in new:
                lines.append(f"removed {path}/{key}")
            elif key not in old:
                lines.append(f"added {path}/{key}")
            else:
                lines += _diff(old[key], new[key], f"{path}/{key}")
        return lines
    return [] if old == new else [f"changed {path}: {old!r} -> {new!r}"]


def test_the_cli_surface_is_pinned() -> None:
    now = surface()
    text = json.dumps(now, indent=1, sort_keys=True) + "\n"
    if os.environ.get(UPDATE):
        SNAPSHOT.write_text(text, encoding="utf-8")
    pinned = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    changes = _diff(pinned, now)
    assert not changes, (
        "the CLI surface changed:\n  " + "\n  ".join(changes[:40])
        + f"\nIf this is on purpose, rerun with {UPDATE}=1 to rewrite {SNAPSHOT.name}, update README's command "
        "table, and keep a renamed flag as a hidden alias (bot.cli.common.add_deprecated_alias).")


def test_every_exception_class_is_in_the_one_error_model() -> None:
    """An exception defined in bot/ or infrarsi/ outside InfraRSIError would escape main as a traceback."""
    _import_everything()
    outside = []
    for pkg in (bot, infrarsi):
        for module in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if module.name.endswith("__main__"):
                continue
            for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
                if (cls.__module__ == module.name and issubclass(cls, BaseException)
                        and not issubclass(cls, InfraRSIError)):
                    outside.append(f"{cls.__module__}.{cls.__qualname__}")
    assert outside == [], ("derive these from infrarsi.errors.InfraRSIError (set exit_code: 2 bad input, 1 the "
                           f"thing checked is not right, 3 may pass on retry), so the CLI prints one line instead of a traceback: {outside}")
    assert set(exit_codes().values()) == {NOT_RIGHT, BAD_INPUT, TRANSIENT}


def test_one_name_per_idea_across_verbs() -> None:
    """A run is ``--run-id`` and a repository the positional REPO on every verb; old names only as hidden aliases."""
    verbs = surface()["parser"]["verbs"]
    everything = {**verbs, **{f"bank {k}": v for k, v in verbs["bank"]["verbs"].items()}}
    no_repo = {"bank", "bank list", "bank export", "bank import"}  # the bank is the user's, not a repo's
    for name, verb in everything.items():
        visible = {f for a in verb["arguments"] if not a["hidden"] for f in a["flags"] or ()}
        # `check --run` runs the baseline once (issue 22's dry run): another idea than a run id.
        assert ("--run" not in visible or name == "check") and "--repo" not in visible, name
        if name not in no_repo:
            assert any(a["dest"] == "repo" and a["flags"] is None for a in verb["arguments"]), name
        run_flags = {f for a in verb["arguments"] if a["dest"] == "run_id" and not a["hidden"] for f in a["flags"]}
        assert run_flags <= {"--run-id"}, name


def test_the_old_spellings_still_parse() -> None:
    parser = build_parser()
    for verb in ("report", "apply"):
        assert parser.parse_args([verb, "r", "--run", "x"]).run_id == "x"
        assert parser.parse_args([verb, "r", "--run-id", "x"]).run_id == "x"
    args = parser.parse_args(["approve", "1", "--as", "lead", "--repo", "somewhere"])
    assert (args.repo, args.repo_option, args.number) == (None, "somewhere", 1)
    args = parser.parse_args(["approve", "somewhere", "1", "--as", "lead"])
    assert (args.repo, args.number) == ("somewhere", 1)
    args = parser.parse_args(["bank", "sync", "origin", "--repo", "somewhere"])
    assert (args.repo, args.repo_option, args.remote) == (None, "somewhere", "origin")


def _readme_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("## The command line", 1)[1]
    rows = re.findall(r"^\| `infrarsi ([a-z]+)([^`]*)` \|", table, re.M)
    return {verb: rest for verb, rest in rows}


def test_the_readme_command_table_names_every_verb_and_only_real_flags() -> None:
    verbs = surface()["parser"]["verbs"]
    rows = _readme_rows()
    assert set(rows) == set(verbs)
    for verb, usage in rows.items():
        flags = {f for a in verbs[verb]["arguments"] if not a["hidden"] for f in a["flags"] or ()}
        for sub in verbs[verb]["verbs"].values():
            flags |= {f for a in sub["arguments"] if not a["hidden"] for f in a["flags"] or ()}
        named = set(re.findall(r"--[a-z][a-z-]*", usage))
        assert named <= flags, (verb, named - flags)


@pytest.mark.parametrize("verb", sorted(walk(build_parser())["verbs"]))
def test_every_verb_has_help_that_exits_0(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([verb, "--help"])
    assert stop.value.code == 0 and f"infrarsi {verb}" in capsys.readouterr().out
