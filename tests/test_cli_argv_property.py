"""Every verb's command line, drawn at random (Hypothesis): never a traceback, and never a trial for a bad value.

Each verb's flags that take a number, a size, a run id or a knob get a value drawn from a pool of good ones and
a pool of bad ones (a number below its range, a word for a number, a run id a branch cannot carry, an unknown
knob); REPO is the repository, a path that does not exist, or a file. When at least one value is bad the
command must end with exit status 2 and one ``error:`` line, and no executor may have been asked to start a
trial (journal, branches and worktrees untouched). A second property throws junk tokens at each verb: whatever
happens, nothing escapes as a traceback. The CLI runs in this process (:mod:`tests.support.cli_driver`), so the
whole property costs seconds.
"""

from __future__ import annotations

import shutil
import string
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bot.patching.catalog as catalog_module
from bot.patching.catalog import catalog_for_repo
from infrarsi.contract import load_contract
from tests.support.cli_driver import TrialStarted, left_behind, recorded_starts, run_cli
from tests.support.repos import commit_all
from tests.support.tinygpt import TINY_ARGS, copy_fixture

Value = tuple[str, bool]  # (the text on the command line, whether it is a good value)


def _ints(low: int) -> st.SearchStrategy[Value]:
    good = st.integers(min_value=low, max_value=low + 40).map(lambda n: (str(n), True))
    bad = st.one_of(st.integers(max_value=low - 1).map(lambda n: (str(n), False)),
                    st.sampled_from(["", "x", "1.5", "1e3", "0x10", "two", "nan"]).map(lambda t: (t, False)))
    return st.one_of(good, bad)


POSITIVE = st.one_of(
    st.floats(min_value=0.01, max_value=1e5, allow_nan=False).map(lambda f: (repr(f), True)),
    st.sampled_from(["0", "-1", "-0.5", "nan", "inf", "-inf", "soon", ""]).map(lambda t: (t, False)))
SIZES = st.one_of(st.sampled_from(["1KB", "60MiB", "2GiB", "100000"]).map(lambda t: (t, True)),
                  st.sampled_from(["0", "-5", "lots", "1XB", "0GiB", ""]).map(lambda t: (t, False)))
RUN_IDS = st.one_of(
    st.sampled_from(["r1", "run-2", "a.b_c", "X9"]).map(lambda t: (t, True)),
    st.sampled_from(["", "a b", "../x", "-x", ".hidden", "a/b", "promote", "x..y", "r.lock", "é"]).map(
        lambda t: (t, False)),
    st.text(alphabet="ab/ :~^?*[\\", min_size=1, max_size=6).filter(lambda t: set(t) - set("ab")).map(
        lambda t: (t, False)))
KNOBS = st.one_of(st.sampled_from(["dtype=bf16", "micro_batch=1", "grad_ckpt=true"]).map(lambda t: (t, True)),
                  st.sampled_from(["nope=1", "dtype=fp16", "micro_batch=3", "dtype", "=1"]).map(lambda t: (t, False)))

#: Each verb: (the argv before REPO, whether REPO is positional, {flag: the values it takes}).
VERBS: dict[str, tuple[tuple[str, ...], dict[str, st.SearchStrategy[Value]]]] = {
    "run": (("run",), {"--budget-trials": _ints(1), "--budget-seconds": POSITIVE, "--parallel": _ints(1),
                       "--initial": _ints(1), "--seed": _ints(0), "--repeats": _ints(2), "--run-id": RUN_IDS,
                       "--llm-token-budget": _ints(0)}),
    "verify": (("verify",), {"--pairs": _ints(1), "--repeats": _ints(2), "--run-id": RUN_IDS, "--knob": KNOBS}),
    "trial": (("trial",), {"--timeout": POSITIVE, "--memory-limit": SIZES, "--run-id": RUN_IDS, "--knob": KNOBS}),
    "doctor": (("doctor",), {"--repeats": _ints(2), "--run-id": RUN_IDS}),
    "report": (("report",), {"--run-id": RUN_IDS}),
    "apply": (("apply",), {"--run-id": RUN_IDS}),
    "journal": (("journal",), {"--run-id": RUN_IDS}),
    "promote": (("promote",), {"--pr": _ints(1), "--pairs": _ints(1)}),
    "init": (("init",), {"--tokens-per-step": _ints(1)}),
    "bank sync": (("bank", "sync"), {"--attempts": _ints(1)}),
    "approve": (("approve",), {"N": _ints(1), "--as": st.just(("lead", True))}),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinygpt (tiny config) with its contract, committed on ``main``."""
    repo = copy_fixture(tmp_path_factory.mktemp("argv") / "tinygpt")
    assert run_cli(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]).code == 0
    (repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    pygit2.init_repository(str(repo), initial_head="main")
    commit_all(repo, "tinygpt with its contract")
    return repo


@pytest.fixture(scope="module")
def catalog(template: Path) -> tuple[object, object]:
    """The catalog's answers for the template (the same for every copy): computed once, not once per example."""
    found = catalog_for_repo(load_contract(template))
    return {a.spec.id: a.spec for a in found if a.spec is not None}, found


@pytest.fixture
def repo(template: Path, catalog: tuple[object, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = Path(shutil.copytree(template, tmp_path / "tinygpt", symlinks=True))
    (tmp_path / "a-file").write_text("not a repository\n")
    monkeypatch.chdir(tmp_path)  # what a verb writes relative to the current directory lands here
    applicable, found = catalog
    monkeypatch.setattr(catalog_module, "applicable_patches", lambda *a, **k: applicable)
    monkeypatch.setattr(catalog_module, "catalog_for_repo", lambda *a, **k: found)
    return copy


@st.composite
def bad_command_lines(draw: st.DrawFn, verb: str) -> list[str]:
    """``verb``'s argv with some of its flags, at least one of them (or REPO) holding a bad value."""
    head, flags = VERBS[verb]
    chosen = draw(st.lists(st.sampled_from(sorted(flags)), min_size=1, max_size=len(flags), unique=True))
    values = {flag: draw(flags[flag]) for flag in chosen}
    repo_good = draw(st.booleans())
    if repo_good and all(good for _, good in values.values()):  # make one value bad
        flag = draw(st.sampled_from([f for f in chosen if f != "--as"] or ["N"]))
        values[flag] = draw(flags[flag].filter(lambda v: not v[1]))
    argv = [*head, "{repo}" if repo_good else draw(st.sampled_from(["{missing}", "{file}"]))]
    argv += [values.pop("N", ("1", True))[0]] if verb == "approve" else []  # approve's positional number
    for flag, (text, _) in draw(st.permutations(list(values.items()))):
        argv.append(f"{flag}={text}")  # '=' keeps a value that starts with '-' a value
    return argv


def _paths(argv: list[str], repo: Path) -> list[str]:
    where = {"{repo}": str(repo), "{missing}": str(repo.parent / "no-such-repo"), "{file}": str(repo.parent / "a-file")}
    return [where.get(a, a) for a in argv]


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_bad_value_is_one_error_line_and_starts_no_trial(verb: str, repo: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    starts = recorded_starts(monkeypatch)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(argv=bad_command_lines(verb))
    def check(argv: list[str]) -> None:
        result = run_cli(_paths(argv, repo))
        assert result.raised is None, (argv, repr(result.raised))
        assert result.code == 2, (argv, result.code, result.err)
        lines = [line for line in result.err.splitlines() if line.strip()]
        assert len(result.error_lines) == 1 and lines[-1] == result.error_lines[0], (argv, result.err)
        assert "Traceback" not in result.err
        assert starts == [], argv
        assert left_behind(repo) == (0, [], []), argv

    check()


JUNK = st.one_of(st.text(alphabet=string.ascii_letters + string.digits + "-=./ _é", max_size=8),
                 st.sampled_from(["--run-id", "--knob", "--patch", "--budget-trials", "--json", "--resume",
                                  "--dry-run", "-v", "-q", "--", "-", "--help=x", "{repo}", "{file}"]))


@pytest.mark.parametrize("verb", ["run", "verify", "trial", "doctor", "report", "apply", "journal", "gc", "check",
                                  "patches", "lock", "promote", "approve", "bank"])
def test_junk_never_escapes_as_a_traceback(verb: str, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = recorded_starts(monkeypatch)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(rest=st.lists(JUNK, max_size=5))
    def check(rest: list[str]) -> None:
        result = run_cli(_paths([verb, "{repo}", *rest], repo))
        assert result.raised is None or isinstance(result.raised, TrialStarted), (rest, repr(result.raised))
        assert "Traceback" not in result.err
        if result.code not in (0, None):
            assert result.error_lines or result.code == 1, (rest, result.code, result.err)

    check()
    del starts
