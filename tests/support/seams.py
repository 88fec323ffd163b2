"""A seam's Protocol against a class that implements it: every member the Protocol declares is there, and every
method takes the Protocol's parameters (names, kinds, defaults present) — so a caller written against the seam
never meets an implementation that cannot take its call."""

from __future__ import annotations

import inspect


def protocol_members(protocol: type) -> list[str]:
    """The members ``protocol`` declares itself (methods, properties, attributes), not ``object``'s."""
    own = {n for n in vars(protocol) if not n.startswith("_")}
    return sorted(own | set(getattr(protocol, "__annotations__", {})))


def mismatches(implementation: type, protocol: type) -> list[str]:
    """What ``implementation`` lacks or takes differently from ``protocol``; empty when it implements it."""
    out = []
    for name in protocol_members(protocol):
        declared = inspect.getattr_static(protocol, name, None)
        if not callable(declared) or isinstance(declared, (staticmethod, classmethod, property)):
            has = hasattr(implementation, name) or name in getattr(implementation, "__annotations__", {})
            if not has and not _set_in_init(implementation, name):
                out.append(f"{name}: missing")
            continue
        impl = getattr(implementation, name, None)
        if impl is None:
            out.append(f"{name}(): missing")
            continue
        want, got = _params(declared), _params(impl)
        for p_name, (kind, has_default) in want.items():
            if p_name not in got:
                if not any(k == inspect.Parameter.VAR_KEYWORD for k, _ in got.values()):
                    out.append(f"{name}(): no parameter {p_name!r}")
            elif got[p_name][0] != kind:
                out.append(f"{name}(): {p_name!r} is {got[p_name][0].description}, the seam says {kind.description}")
            elif has_default and not got[p_name][1]:
                out.append(f"{name}(): {p_name!r} has no default, the seam gives it one")
        extra = [p for p, (k, d) in got.items() if p not in want and not d
                 and k not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
        out += [f"{name}(): requires {p!r}, which the seam does not pass" for p in extra]
    return out


def _params(func: object) -> dict[str, tuple[inspect._ParameterKind, bool]]:
    params = list(inspect.signature(func).parameters.values())[1:]  # type: ignore[arg-type] - self
    return {p.name: (p.kind, p.default is not inspect.Parameter.empty) for p in params}


def _set_in_init(implementation: type, name: str) -> bool:
    try:
        return f"self.{name}" in inspect.getsource(implementation.__init__)
    except (OSError, TypeError):
        return False
