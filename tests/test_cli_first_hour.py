"""Issue 45, a newcomer's first hour: each mistake of its table is answered in one line before it costs a trial.

One test per row. The CLI runs in this process (:mod:`tests.support.cli_driver`) with every executor replaced
by one that records the trials it is asked to start: a refused command line starts none, and leaves no journal
row, no trial branch and no worktree behind.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pygit2
import pytest
import tomlkit

from bot.forges.local import LocalForge
from bot.stages.init.dryrun import dry_run
from infrarsi.contract import load_contract
from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.seams.forge import PullRequestDraft
from infrarsi.trial_record import StepEvent
from tests.support.cli_driver import Outcome, left_behind, recorded_starts, run_cli
from tests.support.repos import commit_all
from tests.support.tinygpt import TINY_ARGS, TINYGPT, copy_fixture


@pytest.fixture
def git_repo(tiny_repo: Path) -> Path:
    """tinygpt (tiny config) with its contract and lock, committed on ``main``."""
    (tiny_repo / ".gitignore").write_text(".infrarsi/\n__pycache__/\n")
    pygit2.init_repository(str(tiny_repo), initial_head="main")
    commit_all(tiny_repo, "tinygpt with its contract")
    return tiny_repo


def _refused(result: Outcome, says: str, *, code: int = 2) -> str:
    """One ``error:`` line that says ``says``, the status, nothing raised."""
    assert result.raised is None, repr(result.raised)
    assert result.code == code, (result.code, result.out, result.err)
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(result.error_lines) == 1 and lines[-1] == result.error_lines[0], result.err
    assert says in result.error_lines[0], result.error_lines[0]
    return result.error_lines[0]


def _nothing_ran(starts: list[TrialSpec], repo: Path) -> None:
    assert starts == []
    assert left_behind(repo) == (0, [], [])


@pytest.mark.parametrize(("argv", "says"), [
    (("run", "{repo}", "--budget-trials", "0"), "argument --budget-trials: expected an integer >= 1, got 0"),
    (("run", "{repo}", "--budget-trials", "-1"), "argument --budget-trials: expected an integer >= 1, got -1"),
    (("run", "{repo}", "--budget-seconds", "0"), "argument --budget-seconds: expected a finite number > 0, got 0"),
    (("run", "{repo}", "--parallel", "0"), "argument --parallel: expected an integer >= 1, got 0"),
    (("trial", "{repo}", "--timeout", "-1"), "argument --timeout: expected a finite number > 0, got -1"),
])
def test_a_number_out_of_range_names_flag_value_and_range(git_repo: Path, monkeypatch: pytest.MonkeyPatch,
                                                         argv: tuple[str, ...], says: str) -> None:
    starts = recorded_starts(monkeypatch)
    line = _refused(run_cli([str(git_repo) if a == "{repo}" else a for a in argv]), says)
    assert line.startswith(f"error: infrarsi {argv[0]}: ")
    _nothing_ran(starts, git_repo)


def test_resume_of_a_run_that_does_not_exist(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = recorded_starts(monkeypatch)
    _refused(run_cli(["run", str(git_repo), "--resume", "--run-id", "nosuch"]),
             "--resume --run-id nosuch: no run 'nosuch' in this repo to resume")
    _nothing_ran(starts, git_repo)


def test_verify_without_a_candidate(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = recorded_starts(monkeypatch)
    _refused(run_cli(["verify", str(git_repo)]), "name the candidate to compare with the baseline: --knob")
    default = load_contract(git_repo).knob("dtype").default
    _refused(run_cli(["verify", str(git_repo), "--knob", f"dtype={default}"]), "is the baseline")
    _nothing_ran(starts, git_repo)


def test_init_names_a_missing_script_and_the_nearest_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_fixture(tmp_path / "tinygpt")
    starts = recorded_starts(monkeypatch)
    for extra in (["--tokens-per-step", "128"], []):
        line = _refused(run_cli(["init", str(repo), "--command", f"python trian.py {TINY_ARGS}", *extra]),
                        "no script trian.py in")
        assert line.endswith("did you mean train.py?")
    assert not (repo / "infrarsi.toml").exists()
    # a contract written by hand that names a missing script: `check` says so too
    assert run_cli(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]).code == 0
    text = (repo / "infrarsi.toml").read_text()
    (repo / "infrarsi.toml").write_text(text.replace('"python", "train.py"', '"python", "trian.py"', 1))
    _refused(run_cli(["check", str(repo)]), "infrarsi.toml: workload.command: python trian.py: no script")
    _nothing_ran(starts, repo)


def test_init_says_the_next_three_steps(tmp_path: Path) -> None:
    repo = copy_fixture(tmp_path / "tinygpt")
    result = run_cli(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"])
    assert result.code == 0, result.err
    steps = result.out.split("next:\n", 1)[1].splitlines()
    assert [s.split(".")[0].strip() for s in steps] == ["1", "2", "3"]
    assert "# guessed:" in steps[0] and "[approvers] users" in steps[0]
    assert "commit infrarsi.toml and infrarsi.lock" in steps[1] and f"infrarsi check {repo} --run" in steps[2]


def _probe_execution(log_dir: Path, steps: int) -> Execution:
    """A baseline whose step events all came from the probe channel, and whose stdout has no step line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "stdout.log").write_text("".join(f"it={i} l={4 - i / 10}\n" for i in range(steps)))
    return Execution(events=tuple(StepEvent(step=i, stamp=float(i), loss=1.0) for i in range(steps)), returncode=0,
                     wall_s=1.0, peak_rss_bytes=1)


def test_check_run_says_ok_only_when_the_regex_itself_matched(tiny_repo: Path) -> None:
    text = (tiny_repo / "infrarsi.toml").read_text()
    assert 'source = "probe"' in text
    (tiny_repo / "infrarsi.toml").write_text(text.replace(
        'source = "probe"', 'source = "stdout"\nstdout_regex = \'^step (?P<step>\\d+) loss (?P<loss>\\S+)\'', 1))
    contract = load_contract(tiny_repo)
    log_dir = tiny_repo / "logs"

    class ProbeOnly:
        name = "local"

        def execute(self, spec: TrialSpec) -> Execution:
            return _probe_execution(Path(spec.log_dir or log_dir), contract.timing.total_steps)

    result = dry_run(contract, executor=ProbeOnly(), log_dir=log_dir)  # type: ignore[arg-type]
    assert not result.ok and result.seen == 0
    assert result.message.startswith(f"the step regex saw 0 step lines, expected {contract.timing.total_steps}")
    assert "came from the infrarsi.probe channel instead" in result.message
    assert "ok:" not in result.message


@pytest.mark.parametrize("verb", ["report", "apply", "doctor", "run", "journal", "trial", "verify"])
@pytest.mark.parametrize("run_id", ["a b", "../x", "-x", "promote"])
def test_a_bad_run_id_is_refused_by_every_verb(git_repo: Path, monkeypatch: pytest.MonkeyPatch, verb: str,
                                               run_id: str) -> None:
    starts = recorded_starts(monkeypatch)
    result = run_cli([verb, str(git_repo), f"--run-id={run_id}"])
    _refused(result, f"argument --run-id: invalid run id {run_id!r}")
    _nothing_ran(starts, git_repo)


def _without_knobs(repo: Path) -> None:
    doc = tomlkit.parse((repo / "infrarsi.toml").read_text())
    for key in ("knobs", "constraints"):
        doc.pop(key, None)
    (repo / "infrarsi.toml").write_text(tomlkit.dumps(doc))
    assert run_cli(["lock", str(repo)]).code == 0


def test_a_run_with_nothing_to_search_stops_before_the_doctor(tiny_repo: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _without_knobs(tiny_repo)  # and not a git repository: no catalog patch applies
    starts = recorded_starts(monkeypatch)
    _refused(run_cli(["run", str(tiny_repo), "--no-bank"]), "the contract has no knob and no catalog patch applies")
    _nothing_ran(starts, tiny_repo)


def test_a_closed_pipe_ends_quietly(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    from bot.cli.main import main

    assert main(["gc", str(git_repo), "--dry-run"]) == 141


def test_gc_piped_into_head_has_no_traceback(git_repo: Path) -> None:
    """The real thing: the reader goes away before gc writes."""
    pipe = subprocess.Popen([sys.executable, "-m", "bot", "gc", str(git_repo), "--dry-run"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert pipe.stdout is not None and pipe.stderr is not None
    pipe.stdout.close()
    err = pipe.stderr.read().decode()
    assert pipe.wait(timeout=120) in (0, 141) and "Traceback" not in err and "BrokenPipe" not in err, err


def _forge_with_a_pr(repo: Path, tmp: Path) -> LocalForge:
    remote = tmp / "remote.git"
    pygit2.init_repository(str(remote), bare=True, initial_head="main")
    git = pygit2.Repository(str(repo))
    git.remotes.create("origin", str(remote))
    git.branches.local.create("infrarsi/promote/r1", git.head.peel(pygit2.Commit))
    git.remotes["origin"].push(["refs/heads/main:refs/heads/main",
                                "refs/heads/infrarsi/promote/r1:refs/heads/infrarsi/promote/r1"])
    forge = LocalForge(remote)
    forge.ensure_pr(PullRequestDraft(head="infrarsi/promote/r1", base="main", title="t", body="b"))
    return forge


def test_approve_refuses_a_login_that_is_not_an_approver(git_repo: Path, tmp_path: Path) -> None:
    text = (git_repo / "infrarsi.toml").read_text()
    (git_repo / "infrarsi.toml").write_text(text.replace("users = []", 'users = ["alice"]\nteams = ["acme/perf"]', 1))
    forge = _forge_with_a_pr(git_repo, tmp_path)
    _refused(run_cli(["approve", str(git_repo), "1", "--as", "mallory"]),
             "approve #1 --as mallory: mallory is not an approver of this repo (the contract's approvers: alice, "
             "team acme/perf)")
    assert forge.reviews(1) == ()
    forge.add_team_member("acme/perf", "bob")
    for login in ("Alice", "bob"):
        ok = run_cli(["approve", str(git_repo), "1", "--as", login])
        assert ok.code == 0 and f"approved by {login}" in ok.out, ok.err
    assert run_cli(["approve", str(git_repo), "1", "--as", "mallory", "--request-changes"]).code == 0


def test_a_model_file_in_latin_1_is_in_the_editable_scope(tmp_path: Path) -> None:
    repo = copy_fixture(tmp_path / "tinygpt")
    model = (TINYGPT / "model.py").read_text()
    (repo / "model.py").write_bytes(("# -*- coding: latin-1 -*-\n# modèle: café\n" + model).encode("latin-1"))
    assert run_cli(["init", str(repo), "--command", f"python train.py {TINY_ARGS}"]).code == 0
    editable = load_contract(repo).scope.editable
    assert "model.py::CausalSelfAttention" in editable and "model.py::GPT" in editable


def test_an_oom_names_the_memory_limit_in_human_units(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed = Execution(events=(), returncode=-9, wall_s=0.5, peak_rss_bytes=9805824, killed_for="memory")
    starts = recorded_starts(monkeypatch, execution=killed)
    result = run_cli(["trial", str(git_repo), "--memory-limit", "1KB"])
    assert result.code == 1 and len(starts) == 1 and starts[0].memory_limit_bytes == 1000
    assert "trial manual/1: oom — peak memory 9.35 MiB reached the limit of 1000 B; killed" in result.out


def test_promote_that_did_not_merge_exits_4_with_its_progress_on_stderr(git_repo: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import bot.stages.apply.merge as merge
    from bot.stages.apply.merge import PromoteResult

    def waiting(repo: Path, number: int, **kw: object) -> PromoteResult:
        say = kw["say"]
        assert callable(say)
        say(f"#{number}: main moved; re-creating the promotion commit on it")
        return PromoteResult(number=number, merge_commit=None, head_sha="c" * 40, base_sha="b" * 40,
                             recreated=True, verdict=None)  # type: ignore[arg-type]

    monkeypatch.setattr(merge, "promote", waiting)
    forge = SimpleNamespace(get_pr=lambda number: SimpleNamespace(head="infrarsi/promote/r1"))
    monkeypatch.setattr("bot.cli.apply.open_forge", lambda *a: forge)
    result = run_cli(["promote", str(git_repo), "--pr", "1"])
    assert result.code == 4, result.err
    assert result.err == "#1: main moved; re-creating the promotion commit on it\n"
    assert result.out.startswith("#1: not merged yet: waiting for an approval of the re-created head cccccccccc")


def test_the_drafted_loss_tolerance_says_how_it_relates_to_the_documented_default(tiny_repo: Path) -> None:
    text = (tiny_repo / "infrarsi.toml").read_text()
    comment = text.split("[loss]\n", 1)[1].splitlines()[0]
    assert comment.startswith("# drafted: an upper bound, tighter than the 0.02 a contract without this line gets")
    assert "rtol = 0.005" in text


def test_every_verb_knows_version_verbosity_and_env(git_repo: Path) -> None:
    version = run_cli(["--version"])
    assert version.code == 0 and version.out.startswith("infrarsi ")
    env = run_cli(["env", str(git_repo)])
    assert env.code == 0 and "- torch: " in env.out and "- executor: local" in env.out

