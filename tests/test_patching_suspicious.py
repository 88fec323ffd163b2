"""The scan of what a patch adds: each construct a speed patch never needs is flagged with its line and why, the
same construct already in the original is not, aliases do not hide one, and no honest catalog patch is flagged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bot.patching.codemods import REGISTRY, run_codemod
from bot.patching.results import Rewritten
from bot.patching.screen import dir_reader, screen_patches
from bot.patching.suspicious import added, quarantine_reason, scan_source, scan_tree
from bot.patching.suspicious_table import WHY
from infrarsi.contract.model import Scope
from infrarsi.patches import Effect, PatchSpec
from infrarsi.trial_record import QUARANTINED

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import os, shutil\nimport sys\nimport time\nimport gc\nimport torch\nimport harness\n\n\n"
BODY = "def step(model, x):\n    y = model(x)\n    return y\n"


def _added(line: str, *, before_line: str = "") -> list[str]:
    """The constructs flagged when ``line`` is added to ``step`` (after ``before_line``, already there)."""
    old = HEAD + BODY.replace("    return y\n", before_line and f"    {before_line}\n" + "    return y\n")
    new = HEAD + BODY.replace("    return y\n", (before_line and f"    {before_line}\n") + f"    {line}\n"
                              "    return y\n")
    return [f.construct for f in added("train.py", old, new)]


#: (added line, the construct named, its class): one of each entry of the table, and the attacker's spellings.
FLAGGED = [
    ("m = __import__('os')", "builtins.__import__", "import"),
    ("sys.modules['torch.optim.optimizer']._global_optimizer_pre_hooks.clear()", "sys.modules", "import"),
    ("m = sys.modules.get('time')", "sys.modules.get", "import"),
    ("import importlib", "import importlib", "import"),
    ("from importlib import import_module", "from importlib import import_module", "import"),
    ("exec('x = 1')", "builtins.exec", "code"),
    ("f = eval('lambda: 0')", "builtins.eval", "code"),
    ("c = compile('1', 'f', 'eval')", "builtins.compile", "code"),
    ("open('out.txt', 'w').write('x')", "open(..., 'w')", "write"),
    ("open(path, mode='a+')", "open(..., 'a+')", "write"),
    ("open(path, m)", "open(..., m)", "write"),
    ("os.open('x', os.O_WRONLY | os.O_CREAT)", "os.open", "write"),
    ("sys.modules['io'].FileIO('x', 'w')", "io.FileIO(..., 'w')", "write"),
    ("Path('x').write_text('y')", ".write_text()", "write"),
    ("Path('x').write_bytes(b'y')", ".write_bytes()", "write"),
    ("Path('x').open('w')", ".open('w')", "write"),
    ("shutil.copy('a', 'b')", "shutil.copy", "write"),
    ("os.remove('a')", "os.remove", "write"),
    ("os.replace('a', 'b')", "os.replace", "write"),
    ("torch.save(model.state_dict(), '/tmp/w.pt')", "torch.save", "write"),
    ("x.numpy().tofile('harness.py')", ".tofile()", "write"),
    ("t = torch.from_file('harness.py', shared=True, size=10)", "torch.from_file", "write"),
    ("os.write(1, b'step 3')", "os.write", "fd"),
    ("os.dup2(3, 1)", "os.dup2", "fd"),
    ("r, w = os.pipe()", "os.pipe", "fd"),
    ("f = os.fdopen(3)", "os.fdopen", "fd"),
    ("pid = os.fork()", "os.fork", "process"),
    ("os.kill(os.getppid(), 19)", "os.kill", "process"),
    ("import ctypes", "import ctypes", "fd"),
    ("import fcntl", "import fcntl", "fd"),
    ("import signal", "import signal", "process"),
    ("sys.modules['atexit']._clear()", "atexit._clear", "process"),
    ("sys.settrace(None)", "sys.settrace", "process"),
    ("sys.setprofile(None)", "sys.setprofile", "process"),
    ("import subprocess", "import subprocess", "process"),
    ("os.system('true')", "os.system", "process"),
    ("sys.stdout = None", "sys.stdout = ...", "stream"),
    ("sys.__stdout__ = None", "sys.__stdout__ = ...", "stream"),
    ("sys.stdout.write = print", "sys.stdout.write = ...", "stream"),
    ("time.perf_counter = lambda: 0.0", "time.perf_counter = ...", "patch"),
    ("harness.time.perf_counter = lambda: 0.0", "time.perf_counter = ...", "patch"),
    ("harness.probe.step = print", "infrarsi.probe.step = ...", "patch"),
    ("setattr(time, 'monotonic', print)", "setattr(time, monotonic)", "patch"),
    ("del os.write", "os.write = ...", "patch"),
    ("__builtins__.print = None", "builtins", "introspect"),
    ("objs = gc.get_objects()", "gc.get_objects", "gc"),
    ("refs = gc.get_referrers(model)", "gc.get_referrers", "gc"),
    ("f = sys._getframe(1)", "sys._getframe", "introspect"),
    ("k = step.__closure__", ".__closure__", "introspect"),
    ("g = globals()", "builtins.globals", "introspect"),
    ("v = vars(os)", "vars(os)", "introspect"),
    ("p = '../.infrarsi/journal.sqlite'", "string naming '.infrarsi'", "records"),
    ("p = 'infrarsi.lock'", "string naming 'infrarsi.lock'", "records"),
    ("p = 'infrarsi.toml'", "string naming 'infrarsi.toml'", "records"),
    ("k = os.environ.get('INFRARSI_PROBE_FD')", "string naming 'INFRARSI_'", "records"),
    ("fds = os.listdir('/proc/self/fd')", "string naming '/proc/self'", "records"),
    ("time.sleep(0.01)", "time.sleep", "pace"),
    ("import socket", "import socket", "network"),
]


@pytest.mark.parametrize(("line", "construct", "kind"), FLAGGED, ids=[f[0][:40] for f in FLAGGED])
def test_each_construct_a_speed_patch_never_needs_is_flagged_with_its_line_and_why(line: str, construct: str,
                                                                                     kind: str) -> None:
    old = HEAD + BODY
    new = HEAD + BODY.replace("    return y\n", f"    {line}\n    return y\n")
    found = added("train.py", old, new)
    assert construct in [f.construct for f in found], found
    (hit,) = [f for f in found if f.construct == construct]
    assert hit.kind == kind and hit.line == 11 and hit.symbol == "step"
    assert str(hit) == f"train.py:11: {construct} ({WHY[kind]})"


ALIASES = [
    ("import os as o", "o.write(1, b'x')"),
    ("from os import write", "write(1, b'x')"),
    ("from os import write as w", "w(1, b'x')"),
    ("w = os.write", "w(1, b'x')"),
    ("o = os", "o.write(1, b'x')"),
    ("", "getattr(os, 'write')(1, b'x')"),
    ("", "getattr(sys.modules['os'], 'write')(1, b'x')"),
    ("", "__import__('os').write(1, b'x')"),
    ("", "sys.modules['os'].write(1, b'x')"),
    ("", "torch.os.write(1, b'x')"),
    ("", "harness.os.write(1, b'x')"),
    ("", "getattr(os, 'wr' 'ite', None)(1, b'x')"),
    ("", "getattr(__import__('os', globals()), 'write')(1, b'x')"),
    ("", "getattr(harness, 'os').write(1, b'x')"),
]

#: A module handed around as a value is a use the scan cannot follow: the handing is flagged.
AS_VALUE = ["m = [os][0]", "for m in (os,):\n        pass", "helper(os)", "m = {'k': harness.os}['k']",
            "return sys"]


@pytest.mark.parametrize("line", AS_VALUE)
def test_a_module_used_as_a_value_is_flagged(line: str) -> None:
    assert [c for c in _added(line) if c.endswith(" as a value")], _added(line)


@pytest.mark.parametrize(("binding", "use"), ALIASES, ids=[f"{b} | {u}"[:50] for b, u in ALIASES])
def test_an_alias_does_not_hide_a_construct(binding: str, use: str) -> None:
    body = f"def step(model, x):\n    {binding}\n    {use}\n    return model(x)\n"
    found = scan_source(HEAD + body)
    assert found is not None and "os.write" in [f.construct for f in found], found


@pytest.mark.parametrize("line", ["os.write(1, b'x')", "torch.save(model.state_dict(), path)",
                                  "open(path, 'w').close()", "sys.modules['json']", "time.sleep(0.1)",
                                  "p = '.infrarsi/x'"])
def test_what_the_original_already_did_in_the_same_definition_is_not_flagged(line: str) -> None:
    assert _added("z = x + 1", before_line=line) == []
    assert _added(line, before_line=line) != []  # the second one is new


def test_a_write_to_a_new_destination_is_flagged_and_the_original_line_is_not() -> None:
    old = HEAD + "def save(model, path):\n    torch.save(model.state_dict(), path)\n"
    new = HEAD + "def save(model, path):\n    torch.save(model.state_dict(), path)\n" \
                 "    torch.save(model.state_dict(), path + '.bak')\n"
    (found,) = added("train.py", old, new)
    assert found.line == 11 and found.detail == "path + '.bak'"
    moved = HEAD + "def save(model, path):\n    x = 1\n    torch.save(model.state_dict(), path)\n"
    assert added("train.py", old, moved) == []
    elsewhere = old + "\n\ndef other(model, path):\n    torch.save(model.state_dict(), path)\n"
    assert [f.symbol for f in added("train.py", old, elsewhere)] == ["other"]  # per definition


HONEST = [
    "model = torch.compile(model)",
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "torch.backends.cudnn.benchmark = True",
    "torch.set_float32_matmul_precision('high')",
    "n = int(os.environ.get('WORLD_SIZE', '1'))",
    "os.environ['OMP_NUM_THREADS'] = '4'",
    "text = open(path).read()",
    "text = open(path, 'rb').read()",
    "p = os.path.join(os.path.dirname(__file__), 'data')",
    "self.__dict__['cache'] = None",
    "dtype = getattr(torch, args.dtype)",
    "act = getattr(torch.nn.functional, 'gelu')",
    "img = Image.open(fp)",
    "pattern = re.compile('step (\\\\d+)')",
    "model.compile()",
    "t0 = time.perf_counter()",
    "gc.disable()",
    "gc.collect()",
    "print(f'step {i} loss {loss:.4f}', flush=True)",
    "x = y.replace('a', 'b')",
    "sys.stdout.flush()",
    "torch.optim.AdamW(params, fused=True)",
    "clock = time",
    "if isinstance(buf, io.BytesIO):\n        pass",
    "hasattr(os, 'sched_getaffinity')",
    "with torch.autocast('cpu', dtype=torch.bfloat16):\n        y = model(x)",
    "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))",
]


@pytest.mark.parametrize("line", HONEST, ids=[h[:40] for h in HONEST])
def test_what_speed_patches_do_is_not_flagged(line: str) -> None:
    assert _added(line) == []


def test_a_local_name_shadows_a_builtin_only_in_its_own_scope() -> None:
    shadowed = HEAD + "def step(model, x, eval=False, compile=None):\n    if eval or compile:\n" \
                      "        return model(x)\n    return x\n"
    assert added("train.py", HEAD + BODY, shadowed) == []
    other = HEAD + "def helper(open):\n    return open\n\n\ndef step(model, x):\n    open('log', 'a')\n"
    assert [f.construct for f in added("train.py", HEAD + BODY, other)] == ["open(..., 'a')"]


def test_code_the_scan_cannot_parse_is_flagged_and_a_non_python_file_is_not_scanned() -> None:
    (found,) = added("train.py", HEAD + BODY, HEAD + "def step(:\n")
    assert found.construct == "code the scan cannot parse" and found.line == 1
    assert scan_tree({"run.sh": "true\n"}, {"run.sh": "rm -rf .infrarsi\n"}, ["run.sh"]) == ()


def test_the_scan_names_each_line_in_the_patched_file_and_the_reason_says_quarantined() -> None:
    new = HEAD + BODY.replace("    return y\n", "    os.dup2(3, 1)\n    os.write(1, b'x')\n    return y\n")
    found = scan_tree({"train.py": HEAD + BODY}, {"train.py": new.encode()}, ["train.py"])
    assert [(f.line, f.construct) for f in found] == [(11, "os.dup2"), (12, "os.write")]
    reason = quarantine_reason(found)
    assert reason.startswith(QUARANTINED) and reason.startswith("quarantined for review: train.py:11: os.dup2 (")
    assert "; train.py:12: os.write (low-level fd trick: " in reason
    assert quarantine_reason(found[:1], ["harness.py: locked path modified"]).endswith(
        ") (also outside the editable scope: harness.py: locked path modified)")
    assert found[0].record() == {"kind": "quarantined", "path": "train.py", "line": 11, "symbol": "step",
                                 "construct": "os.dup2", "why": WHY["fd"]}


def test_a_name_assigned_from_itself_again_and_again_is_scanned_in_linear_time() -> None:
    body = "def f(h, o):\n" + "".join(f"    h = h.view({i})\n    o = o if h else h\n" for i in range(300))
    started = time.perf_counter()
    assert scan_source("import torch\n" + body + "    return h\n") == []
    assert time.perf_counter() - started < 5.0  # following every alias from every use was exponential


def _fixture_files() -> list[Path]:
    """The fixtures' code a patch may edit: not their locked harness and data, setup scripts or tests."""
    skip = {"harness.py", "data.py", "setup.py", "download.py", "prepare.py", "configurator.py", "__init__.py"}
    return sorted(p for p in (ROOT / "fixtures").rglob("*.py")
                  if p.name not in skip and "tests" not in p.parts and "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: str(p.relative_to(ROOT / "fixtures")))
def test_no_catalog_patch_is_ever_flagged_on_the_fixtures(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    for name in sorted(REGISTRY):
        outcome = run_codemod(name, source)
        if isinstance(outcome, Rewritten):
            assert added(path.name, source, outcome.code) == [], name


def test_a_quarantined_patch_never_enters_the_search_space(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import os\n\n\ndef f(x):\n    return x + 1\n")
    effect = Effect(time_ratio=0.9, time_sigma=0.1, mem_ratio=1.0, mem_sigma=0.1, source="test")
    specs = [PatchSpec(id=pid, title=pid, rationale="test", targets=("m.py::f",), kind="replacement",
                       replacement=code, effect=effect)
             for pid, code in (("honest", "def f(x):\n    return x + 2\n"),
                               ("relay", "def f(x):\n    os.dup2(3, 1)\n    return x + 1\n"))]
    out = screen_patches(dir_reader(tmp_path), specs, Scope(editable=("m.py::f",)))
    assert [s.id for s in out.accepted] == ["honest"]
    assert out.quarantined == {"relay": f"{QUARANTINED}m.py:5: os.dup2 ({WHY['fd']})"}
