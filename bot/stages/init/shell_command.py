"""The shell forms people write a training command in, read (never run) into a working directory,
a fixed environment and the job's own argv.

READMEs say ``cd projects/chargpt && python chargpt.py`` (karpathy/minGPT),
``OMP_NUM_THREADS=1 python3 train.py``, ``python -m scripts.base_train`` or
``bash runs/runcpu.sh`` (karpathy/nanochat). ``init`` keeps what a contract can
express — ``workload.workdir``, ``workload.env``, the job's command — and names in
one line what it cannot: the commands before the job (data preparation, installs),
pipes and redirections (the bot reads the job's output itself), a background ``&``.
A script is read line by line: ``cd``, ``export`` and assignments are followed, and
its last Python (or ``torchrun``) command is the job.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from infrarsi.contract.entry import PYTHONS
from infrarsi.errors import BAD_INPUT, InfraRSIError

_LAUNCHERS = {"torchrun", "deepspeed", "accelerate"}
_PREFIXES = {"nohup", "time", "exec", "env", "command", "stdbuf"}
_QUIET = re.compile(r"^(set|echo|printf|source|\.|mkdir|true|:|shopt|trap|unset|conda|module|ulimit|wait)$")
_CONTROL = re.compile(r"^(if|then|else|elif|fi|for|while|until|do|done|case|esac|function|\{|\}|\[\[?|test)$")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_REDIRECT = re.compile(r"(?:^|(?<=\s))\d?(?:&>>|&>|>>|>&|>\||>|<)\s*[^\s;&|]+")
_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+|@|\*)")
_SCRIPT_DIR = re.compile(r"""\$\(\s*dirname\s+["']?(?:\$0|\$\{BASH_SOURCE(?:\[0\])?\})["']?\s*\)""")
_OPERATORS = {"&&", "||", ";", "|", "&", ";;", "(", ")"}
_MAX_DEPTH = 3


class CommandError(InfraRSIError, ValueError):
    """The command cannot be read into a job the contract can start; the message says what to pass instead."""

    exit_code = BAD_INPUT


@dataclass(frozen=True, kw_only=True, slots=True)
class ShellJob:
    """The job a command line (or a script it runs) amounts to."""

    argv: tuple[str, ...]  # from the interpreter or launcher on: ("python3", "chargpt.py", "--x=1")
    workdir: str = "."  # repo-relative
    env: tuple[tuple[str, str], ...] = ()
    dropped: tuple[str, ...] = ()  # what the contract cannot keep, each "`text` (where)"
    origin: str = ""  # the script the job was read from, with its line

    def kept(self) -> str:
        """What was kept, as a command line from the repo's root."""
        line = " ".join([f"{k}={shlex.quote(v)}" for k, v in self.env] + [shlex.quote(a) for a in self.argv])
        return line if self.workdir == "." else f"cd {shlex.quote(self.workdir)} && {line}"

    def note(self) -> str:
        """One line: what was read and kept, and what was not."""
        head = f"read {self.origin}: " if self.origin else ""
        if not self.dropped:
            return f"{head}kept `{self.kept()}`"
        shown = "; ".join(self.dropped[:4]) + (f"; and {len(self.dropped) - 4} more" if len(self.dropped) > 4 else "")
        return (f"{head}kept `{self.kept()}`; not kept: {shown} — a trial runs only the job: run the rest once "
                "yourself before trials")


@dataclass(kw_only=True)
class _State:
    """Where a shell reading a script stands: its directory, variables and what it exported."""

    root: Path
    workdir: str = "."
    variables: dict[str, str] = field(default_factory=dict)
    exported: dict[str, str] = field(default_factory=dict)
    exported_at: dict[str, str] = field(default_factory=dict)  # variable -> where it was exported
    dropped: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # earlier Python commands: a later one is the job
    job: tuple[list[str], dict[str, str], str, str] | None = None  # (argv, env, workdir, origin)


def read_command(command: str, root: Path) -> ShellJob:
    """The job ``command`` runs in the repo at ``root`` (a script it names is read, not run)."""
    state = _State(root=root.resolve())
    _read_lines([command], state, origin="", depth=0, script_args=[])
    if state.job is None:
        raise CommandError(f"--command {command!r}: no Python job found in it; pass the training command itself, "
                           "e.g. --command \"python train.py ...\"")
    argv, raw_env, workdir, origin = state.job
    env = _job_env(state, raw_env, f" ({origin})" if origin else "")
    state.dropped[:0] = state.superseded
    if any("$" in a for a in argv):
        unresolved = next(a for a in argv if "$" in a)
        raise CommandError(f"{origin or '--command'}: {unresolved!r} names a variable the command does not set; "
                           "pass the job's command with its value written out")
    return ShellJob(argv=tuple(argv), workdir=workdir, env=tuple(env.items()), dropped=tuple(state.dropped),
                    origin=origin)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) with backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for no, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = no
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _expand(text: str, state: _State, script_args: list[str], script_dir: str | None) -> str:
    if script_dir is not None:  # bash's `$(dirname "$0")`: the script's folder as it was invoked, relative
        text = _SCRIPT_DIR.sub(script_dir, text)

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in ("@", "*"):
            return " ".join(shlex.quote(a) for a in script_args)
        if name.isdigit():
            i = int(name)
            return shlex.quote(script_args[i - 1]) if 0 < i <= len(script_args) else ""
        if name in state.variables:
            return state.variables[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VARIABLE.sub(value, text)


def _read_lines(lines: list[str], state: _State, *, origin: str, depth: int, script_args: list[str],
                script_dir: str | None = None) -> None:
    for no, raw in _logical_lines("\n".join(lines)):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{origin} line {no}" if origin else ""
        text = _expand(text, state, script_args, script_dir)
        text = _REDIRECT.sub(" ", text)
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
        except ValueError as e:
            raise CommandError(f"{where or '--command'}: cannot read {raw.strip()!r} ({e})") from None
        before = len(state.dropped)
        _read_segments(tokens, state, where=where, depth=depth)
        if origin and len(state.dropped) > before + 1:  # a script's line is named once, as written
            short = raw.strip() if len(raw.strip()) <= 60 else raw.strip()[:57] + "..."
            state.dropped[before:] = [f"`{short}` ({where})"]


def _segments(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """(the operator before it, the words) of each simple command in a line."""
    out: list[tuple[str, list[str]]] = []
    before, words = "", []
    for tok in tokens:
        if tok in _OPERATORS:
            out.append((before, words))
            before, words = tok, []
        else:
            words.append(tok)
    out.append((before, words))
    return [(op, w) for op, w in out if w]


def _read_segments(tokens: list[str], state: _State, *, where: str, depth: int) -> None:
    at = f" ({where})" if where else ""
    for before, words in _segments(tokens):
        shown = " ".join(words)
        if before in ("|", "||"):
            state.dropped.append(f"`{before} {shown}`{at}")
            continue
        env: dict[str, str] = {}
        while words and (m := _ASSIGN.match(words[0])):
            env[m.group(1)] = m.group(2)
            words = words[1:]
        if not words:  # `VAR=value` alone: a shell variable (exported when it already is)
            state.variables.update(env)
            state.exported.update({k: v for k, v in env.items() if k in state.exported})
            continue
        words = _strip_prefixes(words, env)
        head = words[0]
        if head == "cd":
            state.workdir = _cd(state, words[1:], where)
        elif head == "export":
            for word in words[1:]:
                if (m := _ASSIGN.match(word)) is not None:
                    state.variables[m.group(1)] = m.group(2)
                    state.exported[m.group(1)] = m.group(2)
                elif word in state.variables:
                    state.exported[word] = state.variables[word]
                name = word.partition("=")[0]
                state.exported_at[name] = where
        elif head in ("bash", "sh") and len(words) > 1 and words[1].endswith(".sh") or head.endswith(".sh"):
            script = words[1] if head in ("bash", "sh") else head
            _read_script(state, script, words[2:] if head in ("bash", "sh") else words[1:], where, depth)
        elif PYTHONS.match(head) or head in _LAUNCHERS or head.endswith(".py") or words[:2] == ["uv", "run"]:
            argv = words[2:] if head == "uv" else words
            if state.job is not None:
                state.superseded.append(f"`{' '.join(state.job[0])}`{f' ({state.job[3]})' if state.job[3] else ''}")
            state.job = (list(argv), {**state.exported, **env}, state.workdir, where)
        elif _QUIET.match(head) or _CONTROL.match(head):
            continue
        else:
            state.dropped.append(f"`{shown}`{at}")
    if tokens and tokens[-1] == "&" and state.job is not None and state.job[3] == where:
        state.dropped.append(f"`&`{at} (the bot runs the job in the foreground)")


def _job_env(state: _State, env: dict[str, str], at: str) -> dict[str, str]:
    """The variables the job starts with; one whose value names a variable the script never sets is left out."""
    out = {}
    for name, value in {**state.exported, **env}.items():
        if "$" in value:
            where = state.exported_at.get(name) if name not in env else None
            state.dropped.append(f"`{name}={value}`{f' ({where})' if where else at} (names a variable the command "
                                 "does not set)")
        else:
            out[name] = value
    return out


def _strip_prefixes(words: list[str], env: dict[str, str]) -> list[str]:
    """``nohup``, ``time``, ``env A=b``, ``nice -n 10``: what runs the job, not the job."""
    while words:
        if words[0] in _PREFIXES:
            words = words[1:]
            while words and (m := _ASSIGN.match(words[0])):
                env[m.group(1)] = m.group(2)
                words = words[1:]
        elif words[0] == "nice":
            words = words[3:] if words[1:2] == ["-n"] else words[1:]
        else:
            break
    return words or ["true"]


def _cd(state: _State, args: list[str], where: str) -> str:
    target = args[0] if args else "~"
    if target.startswith(("~", "-")) or "$" in target:
        raise CommandError(f"{where or '--command'}: `cd {target}` leaves the repo or names a variable; a job runs "
                           "from a folder inside its repo (workload.workdir)")
    if os.path.isabs(target):
        try:
            rel = Path(target).resolve().relative_to(state.root).as_posix()
        except ValueError:
            raise CommandError(f"{where or '--command'}: `cd {target}` is outside the repo {state.root}; a job runs "
                               "from a folder inside its repo (workload.workdir)") from None
    else:
        rel = posixpath.normpath(posixpath.join(state.workdir, target))
    if rel == ".." or rel.startswith("../"):
        raise CommandError(f"{where or '--command'}: `cd {target}` leaves the repo; a job runs from a folder inside "
                           "its repo (workload.workdir)")
    if not (state.root / rel).is_dir():
        raise CommandError(f"{where or '--command'}: `cd {target}`: no folder {rel!r} in the repo")
    return rel


def _read_script(state: _State, script: str, args: list[str], where: str, depth: int) -> None:
    rel = posixpath.normpath(posixpath.join(state.workdir, script))
    path = state.root / rel
    if depth >= _MAX_DEPTH or not path.is_file():
        what = "scripts nested too deep" if path.is_file() else f"no file {rel!r} in the repo"
        raise CommandError(f"{where or '--command'}: `{script}`: {what}; pass the job's command itself")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"{rel}: cannot be read ({e})") from None
    _read_lines(text.splitlines(), state, origin=rel, depth=depth + 1, script_args=args,
                script_dir=posixpath.dirname(script) or ".")
