"""How the witness (and the device memory reporter) get into a trial's interpreter: a ``sitecustomize`` first
on ``PYTHONPATH``.

The executor asks :func:`open_channel` for a fresh key and two pipes, adds
:attr:`WitnessChannel.env` to the trial's environment and passes its
descriptors; after the trial, :meth:`WitnessChannel.result` authenticates what
the witness wrote. See ``docs/trials.md`` ("The witness") for the threat model.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from infrarsi.seams.executor import TrialSpec
from infrarsi.witness import WITNESS_ENV, WitnessResult, authenticate, new_key, source_sha256

SITE_DIR = Path(__file__).resolve().parent / "site"
PAYLOAD = SITE_DIR / "sitecustomize.py"
#: Set in every trial's environment: the site payload then reports GPU memory on the probe channel (its docstring).
DEVICE_MEMORY_ENV = "INFRARSI_DEVICE_MEMORY"
#: Set with ``timing.source = "optimizer"``: the site payload is then the bot's own step clock (its docstring).
STEP_CLOCK_ENV = "INFRARSI_STEP_CLOCK"


def site_path(pythonpath: str | None) -> str:
    """``PYTHONPATH`` with the site payload's directory first (once)."""
    rest = [p for p in (pythonpath or "").split(os.pathsep) if p and p != str(SITE_DIR)]
    return os.pathsep.join([str(SITE_DIR), *rest])


def device_memory_env(pythonpath: str | None) -> dict[str, str]:
    """The variables that make every Python process of a trial report its GPU memory (nothing on a CPU)."""
    return {DEVICE_MEMORY_ENV: "1", "PYTHONPATH": site_path(pythonpath)}


def step_clock_env(spec: TrialSpec) -> dict[str, str]:
    """With ``timing.source = "optimizer"``: the variable that makes the site payload write one step event per
    optimizer step on the probe channel, carrying the contract's tokens (left set, so every rank steps; the bot
    reads rank 0's). Empty for any other source."""
    if spec.source != "optimizer":
        return {}
    return {STEP_CLOCK_ENV: str(spec.step_tokens) if spec.step_tokens else "-"}


def payload_sha256() -> str:
    """The sha256 of the witness's source as the bot ships it (checked again after the trial)."""
    return source_sha256(PAYLOAD.read_bytes())


@dataclass(kw_only=True)
class WitnessChannel:
    """One trial's witness: the child's descriptors and variables, the bot's read end and key."""

    key: bytes
    expected_sha256: str
    report_read: IO[bytes]
    child_fds: tuple[int, int]
    env: dict[str, str]
    lines: list[str] = field(default_factory=list)
    _thread: threading.Thread | None = None

    def started(self) -> None:
        """Close the child's ends in the bot (the child holds them now) and start reading."""
        for fd in self.child_fds:
            os.close(fd)

        def read() -> None:
            try:
                for raw in iter(self.report_read.readline, b""):
                    self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
            except (OSError, ValueError):
                pass

        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()

    def result(self) -> WitnessResult:
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.report_read.close()
        result = authenticate(self.lines, key=self.key, expected_sha256=self.expected_sha256)
        if result.error is None and payload_sha256() != self.expected_sha256:
            return WitnessResult(report=result.report, error="the witness's source was edited during the trial")
        return result

    def abandon(self) -> None:
        for fd in self.child_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.report_read.close()


def witness_final_step(spec: TrialSpec) -> int | None:
    """The optimizer step after which the witness reports: the last the bot's stop is sure to come after.

    With a line every ``k`` optimizer steps the E-th line comes at step (E-1)k+1 (a job that prints at step
    0: minGPT) or at Ek (one that prints at k: the HF Trainer); the first is reached by both before the bot
    stops the job, so baseline and candidate report at the same step."""
    if not spec.expected_steps:
        return None
    k = max(1, spec.steps_per_line)
    return spec.expected_steps if k == 1 else (spec.expected_steps - 1) * k + 1


def key_secret(key: bytes, count_step: int) -> bytes:
    """What the witness's key channel carries: the key, then the step to count. Never the environment: the
    variable is removed at start-up, but /proc/self/environ keeps what the process was started with."""
    return key + b"\n" + str(int(count_step)).encode()


def open_channel(*, count_step: int, pythonpath: str | None, final_step: int | None = None) -> WitnessChannel:
    """A key written into a pipe (read once by the witness), a report pipe, and the variables to pass.
    ``final_step``: the optimizer step after which the bot stops the job (the witness reports then)."""
    key = new_key()
    key_read, key_write = os.pipe()
    os.write(key_write, key_secret(key, count_step))
    os.close(key_write)
    report_read, report_write = os.pipe()
    path = site_path(pythonpath)
    config = f"{report_write},{key_read},0" + (f",{final_step}" if final_step else "")
    env = {WITNESS_ENV: config, "PYTHONPATH": path}
    return WitnessChannel(key=key, expected_sha256=payload_sha256(), report_read=os.fdopen(report_read, "rb"),
                          child_fds=(report_write, key_read), env=env)
