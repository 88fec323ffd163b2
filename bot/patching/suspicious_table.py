"""What a speed patch never needs, in one table: each class of construct the quarantine flags, and why.

:mod:`bot.patching.suspicious` scans what a patch adds against it; docs/trials.md ("The quarantine") renders it
for people. Dotted names are resolved ones: ``o.write`` after ``import os as o`` is ``os.write``.
"""

from __future__ import annotations

import sys

from infrarsi.contract.load import CONTRACT_FILE
from infrarsi.contract.lock import LOCK_FILE
from infrarsi.rundir import STATE_DIR

#: Why a speed patch never needs each class of construct (no ";": a reason lists findings separated by "; ").
WHY = {
    "import": "dynamic import: a module reached by name at run time escapes the import audit",
    "code": "code from a string: code the audit never read",
    "write": "file write the original code did not make: how the lock, the run's records or the next run's "
             "start get tampered with",
    "fd": "low-level fd trick: step events travel on the job's descriptors, and holding, relaying or pacing them "
          "shrinks the measured step",
    "process": "process or signal control: a child process, a signal handler or an exit hook acts outside the "
               "step the bot measures",
    "stream": "stream replacement: step lines are read from the job's streams, and a replaced stream holds or "
              "paces them",
    "patch": "replaces a standard-library or bot object: the bot's witness and the job's clock rely on them",
    "gc": "walks every live object, the witness's key and hooks included",
    "introspect": "introspection of frames, closures or a module's namespace: reaches state the job does not own",
    "records": "names the bot's run records, lock, contract or variables",
    "network": "network access: a training step talks to no one",
    "pace": "a pause or a timer: a faster step never waits, and waiting is how step events get paced",
    "bot": "reaches into the bot's own code (its probe, its witness)",
}

#: Dotted names (a prefix covers what is under it: ``importlib`` covers ``importlib.util.find_spec``) → class.
RULES: dict[str, str] = {
    **dict.fromkeys(("builtins.__import__", "importlib", "sys.modules", "imp", "pkgutil", "runpy", "zipimport",
                     "sys.meta_path", "sys.path_hooks"), "import"),
    **dict.fromkeys(("builtins.exec", "builtins.eval", "builtins.compile", "code", "codeop", "types.CodeType",
                     "types.FunctionType"), "code"),
    **dict.fromkeys(("shutil", "tempfile", "sqlite3", "mmap", "dbm", "shelve", "torch.from_file",
                     "torch.UntypedStorage.from_file", "torch.TypedStorage.from_file")
                    + tuple(f"os.{n}" for n in ("remove", "unlink", "rename", "renames", "replace", "rmdir",
                                                  "removedirs", "mkdir", "makedirs", "truncate", "ftruncate",
                                                  "link", "symlink", "chmod", "chown", "utime", "mkfifo", "mknod")),
                    "write"),
    **dict.fromkeys(tuple(f"os.{n}" for n in ("write", "writev", "pwrite", "pwritev", "sendfile", "read", "readv",
                                              "pread", "dup", "dup2", "pipe", "pipe2", "fdopen", "close",
                                              "closerange", "set_inheritable", "set_blocking", "openpty",
                                              "memfd_create", "eventfd"))
                    + ("fcntl", "ctypes", "_ctypes", "cffi", "select", "selectors", "termios", "resource"), "fd"),
    **dict.fromkeys(tuple(f"os.{n}" for n in ("system", "popen", "fork", "forkpty", "kill", "killpg", "_exit",
                                              "abort", "execl", "execle", "execlp", "execlpe", "execv", "execve",
                                              "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
                                              "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
                                              "posix_spawnp", "register_at_fork", "setsid", "setpgrp"))
                    + ("subprocess", "pty", "multiprocessing", "signal", "atexit", "faulthandler", "sys.settrace",
                       "sys.setprofile", "sys.addaudithook", "sys.set_asyncgen_hooks", "threading.settrace",
                       "threading.setprofile", "threading.settrace_all_threads", "threading.setprofile_all_threads",
                       "_thread", "torch.multiprocessing.spawn"), "process"),
    **dict.fromkeys(("contextlib.redirect_stdout", "contextlib.redirect_stderr", "sys.__stdout__",
                     "sys.__stderr__", "sys.__stdin__", "sys.stdout.buffer", "sys.stderr.buffer",
                     "sys.stdout.fileno", "sys.stderr.fileno", "sys.stdout.reconfigure", "sys.stderr.reconfigure",
                     "sys.displayhook", "sys.excepthook"), "stream"),
    **dict.fromkeys(("builtins", "builtins.globals", "builtins.vars", "builtins.locals", "builtins.breakpoint",
                     "sys._getframe", "sys._current_frames", "inspect.currentframe", "inspect.stack",
                     "inspect.trace", "inspect.getouterframes", "inspect.getinnerframes", "inspect.getclosurevars",
                     "traceback.walk_stack"), "introspect"),
    **dict.fromkeys(("time.sleep", "sched", "threading.Timer", "torch.cuda._sleep", "signal.pause"), "pace"),
    "infrarsi": "bot",
    **dict.fromkeys(("gc.get_objects", "gc.get_referrers", "gc.get_referents"), "gc"),
    **dict.fromkeys(("socket", "ssl", "urllib", "http", "ftplib", "smtplib", "requests", "httpx", "urllib3",
                     "xmlrpc"), "network"),
}

#: Calls that write a file, and which argument is the destination (a write of the same destination in the same
#: definition of the original is the original's).
WRITERS: dict[str, int] = {"torch.save": 1, "torch.jit.save": 1, "torch.onnx.export": 2, "torch.export.save": 1,
                           "numpy.save": 0, "numpy.savez": 0, "numpy.savez_compressed": 0, "numpy.savetxt": 0,
                           "numpy.memmap": 0, "numpy.lib.format.open_memmap": 0, "os.open": 0}
#: Functions that open a file by a mode argument (position of the mode).
OPENERS: dict[str, int] = {"builtins.open": 1, "io.open": 1, "io.FileIO": 1, "codecs.open": 1, "os.fdopen": 1,
                           "gzip.open": 1, "bz2.open": 1, "lzma.open": 1, "tarfile.open": 1, "zipfile.ZipFile": 1}
#: Methods flagged on any receiver: they only ever write a file (``Path.write_text``, ``ndarray.tofile``).
WRITE_METHODS = frozenset({"write_text", "write_bytes", "touch", "unlink", "rmdir", "symlink_to", "hardlink_to",
                           "tofile", "from_file"})
#: Attributes that reach a function's frame, closure or globals, or every subclass of a type.
INTROSPECT_ATTRS = frozenset({"__closure__", "__globals__", "__code__", "__subclasses__", "__builtins__",
                              "f_locals", "f_globals", "f_back", "f_builtins", "gi_frame", "cr_frame", "tb_frame",
                              "cell_contents", "__self_class__", "__loader__", "__spec__"})
#: Substrings of string literals that name the bot's records, most specific first.
RECORDS = (STATE_DIR, LOCK_FILE, CONTRACT_FILE, "INFRARSI_", "sitecustomize", "/proc/self", "/dev/fd")
STREAMS = frozenset({"sys.stdout", "sys.stderr", "sys.stdin", "sys.__stdout__", "sys.__stderr__", "sys.__stdin__"})
#: Built-in names the scan resolves when nothing in scope binds them (the rest are not in the table).
BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "hasattr",
                      "vars", "globals", "locals", "breakpoint", "__builtins__"})
#: Standard-library modules a job may reach through another module's attribute (``harness.time``, ``torch.os``),
#: and the bot's probe as a job's harness holds it (``harness.probe``).
REROOTS = {"os": "os", "sys": "sys", "time": "time", "builtins": "builtins", "io": "io", "gc": "gc",
           "atexit": "atexit", "signal": "signal", "threading": "threading", "importlib": "importlib",
           "shutil": "shutil", "subprocess": "subprocess", "ctypes": "ctypes", "probe": "infrarsi.probe"}
#: Modules a patch may use only by name (``os.path.join``), never as a value (``[os][0].write``, ``f(os)``): what
#: the scan looks for lives in them, and a module handed around as a value is one whose use it cannot follow.
BY_NAME_ONLY = frozenset({"os", "sys", "builtins", "gc", "importlib", "shutil", "subprocess", "signal", "atexit",
                          "ctypes", "fcntl", "io", "time", "threading", "inspect", "socket", "tempfile", "mmap",
                          "pty", "resource", "select", "infrarsi", "infrarsi.probe"})
#: Modules whose attributes a patch may not assign: the standard library and the bot.
GUARDED = frozenset(sys.stdlib_module_names) | {"infrarsi"}
#: Mode letters that open a file for writing, and every letter a mode may have.
WRITE_MODE = frozenset("wax+")
MODE_LETTERS = frozenset("rwxabt+U")
