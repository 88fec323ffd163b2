"""The local executor on tiny shell jobs: step lines and probe events, its logs, a command that cannot start,
a tree that no longer matches the lock. The executor contract on real training jobs: test_executor_contract.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bot.executors.local import LocalExecutor
from infrarsi.probe import FD_ENV
from infrarsi.seams.executor import TrialSpec


def _sh(script: str, tmp_path: Path, **kw: object) -> TrialSpec:
    return TrialSpec(argv=("sh", "-c", script), cwd=str(tmp_path), timeout_s=10.0, **kw)  # type: ignore[arg-type]


def test_stdout_step_lines_are_stamped_and_the_logs_kept(tmp_path: Path) -> None:
    spec = _sh("echo 'step 1 loss 2.5'; echo 'step 2 loss 2.0'; echo oops >&2; exit 4", tmp_path, source="stdout",
               stdout_regex=r"step (?P<step>\d+) loss (?P<loss>[\d.]+)", log_dir=str(tmp_path / "logs"))
    ex = LocalExecutor(sample_interval_s=0.005).execute(spec)
    assert [(e.step, e.loss) for e in ex.events] == [(1, 2.5), (2, 2.0)]
    assert ex.events[0].stamp <= ex.events[1].stamp
    assert (ex.returncode, ex.killed_for, ex.stderr_tail) == (4, None, "oops")
    assert (tmp_path / "logs" / "stdout.log").read_text() == "step 1 loss 2.5\nstep 2 loss 2.0\n"
    assert (tmp_path / "logs" / "stderr.log").read_text() == "oops\n"
    assert ex.lock_changed is None and dict(ex.host)["cpus"] >= 1


def test_probe_events_arrive_on_their_own_descriptor_and_secrets_stay_out(tmp_path: Path) -> None:
    script = (f'echo \'{{"event": "step", "step": 1, "tokens": 8}}\' > /proc/self/fd/${FD_ENV}; '
              'echo "token=${GITHUB_TOKEN:-none} knob=$KNOB"')
    ex = LocalExecutor(base_env={"PATH": "/usr/bin:/bin", "GITHUB_TOKEN": "secret"}).execute(
        _sh(script, tmp_path, env=(("KNOB", "7"),), log_dir=str(tmp_path / "logs")))
    assert [(e.step, e.tokens) for e in ex.events] == [(1, 8)]
    assert (tmp_path / "logs" / "stdout.log").read_text() == "token=none knob=7\n"


def test_a_command_that_cannot_start_is_127_with_the_reason(tmp_path: Path) -> None:
    ex = LocalExecutor().execute(TrialSpec(argv=("/no/such/binary",), cwd=str(tmp_path)))
    assert ex.returncode == 127 and ex.events == ()
    assert ex.stderr_tail.startswith("could not start '/no/such/binary': ")


def test_a_tree_that_no_longer_matches_the_lock_is_not_started(tmp_path: Path) -> None:
    (tmp_path / "harness.py").write_text("edited")
    lock = (("harness.py", hashlib.sha256(b"original").hexdigest()),)
    ex = LocalExecutor().execute(_sh(f"touch {tmp_path}/ran", tmp_path, root=str(tmp_path), lock=lock))
    assert ex.returncode is None and ex.lock_changed == ("harness.py",)
    assert ex.stderr_tail.startswith("not started: 1 locked file(s) differ from the lock")
    assert not (tmp_path / "ran").exists()


def test_an_interrupt_before_execute_does_not_stick(tmp_path: Path) -> None:
    executor = LocalExecutor(sample_interval_s=0.005)
    executor.interrupt()  # execute clears a stale request: only one made while it runs counts
    assert executor.execute(_sh("exit 0", tmp_path)).killed_for is None
