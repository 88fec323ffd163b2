"""The one place a candidate becomes a command: the job's argv and the environment its knobs set.

A trial's launch (every executor) and the report's "reproduce" block are both
renderings of :func:`job_line`, so what the report tells a reader to run is what
the trial ran. Every knob is passed explicitly, the baseline's defaults too: a
default in the training script that differs from the contract's cannot make
the baseline something other than the contract says.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infrarsi.contract.knob_codec import hydra_text
from infrarsi.contract.model import PYTHON_PLACEHOLDER, Contract, Knob, KnobValue

Env = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class JobLine:
    """The job's argv and the environment variables its knobs set (on top of the executor's environment)."""

    argv: tuple[str, ...]
    env: Env = ()

    def shell(self) -> str:
        """As a user would type it: ``VAR=value python train.py --flag value``, quoted for a POSIX shell."""
        return " ".join([f"{k}={shlex.quote(v)}" for k, v in self.env] + [shlex.quote(a) for a in self.argv])


def knob_arguments(knob: Knob, value: KnobValue) -> tuple[tuple[str, ...], Env]:
    """The argv words and environment entries that pass ``value`` the way ``knob`` says."""
    if knob.env is not None:
        return (), ((knob.env, knob.codec.to_cli(value)),)
    if knob.override is not None:
        return (f"{knob.override}={hydra_text(knob.codec.to_cli(value))}",), ()
    assert knob.flag is not None, f"knob {knob.name} has no way to reach the job"
    if knob.switch:
        chosen = knob.flag if value else knob.off_flag
        return ((chosen,) if chosen else ()), ()
    text = knob.codec.to_cli(value)
    return ((f"{knob.flag}={text}",) if knob.form == "equals" else (knob.flag, text)), ()


def job_line(command: Sequence[str], args: Sequence[str], knobs: Sequence[Knob], values: Mapping[str, KnobValue],
             *, interpreter: str | None = None, fixed_env: Env = ()) -> JobLine:
    """Fixed command and arguments first, then every knob (``values`` over its default), in contract order.

    ``interpreter`` replaces a leading ``python`` (a trial runs under the bot's
    own interpreter); without it the command stays as the contract writes it.
    ``fixed_env`` (the workload's own ``VAR=value``) comes before the knobs' variables.
    """
    argv = list(command)
    if interpreter is not None and argv and argv[0] == PYTHON_PLACEHOLDER:
        argv[0] = interpreter
    argv += args
    env: list[tuple[str, str]] = list(fixed_env)
    for knob in knobs:
        words, entries = knob_arguments(knob, values.get(knob.name, knob.default))
        argv += words
        env += entries
    return JobLine(argv=tuple(argv), env=tuple(env))


def contract_job_line(contract: Contract, values: Mapping[str, KnobValue], *,
                      interpreter: str | None = None) -> JobLine:
    """:func:`job_line` of the contract's workload."""
    return job_line(contract.workload.command, contract.workload.args, contract.knobs, values,
                    interpreter=interpreter, fixed_env=contract.workload.env)
