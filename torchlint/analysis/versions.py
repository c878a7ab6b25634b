"""Versions, in one spelling: text such as ``"2.0"`` or a specifier such as ``">=1.7,<2.4"``,
read into tuples of ints that compare as versions do. Rules ask ``ctx.torch_at_least("2.0")``;
configuration, data tables and rule metadata write versions as text."""

from __future__ import annotations


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.1"`` -> ``(2, 1)``; ``"2.1.0+cu121"`` -> ``(2, 1, 0)``; ``"2.4rc1"`` -> ``(2, 4)``."""
    parts = []
    for piece in str(text).strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:
            break
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(parts)


def version_matches(spec: str, version: tuple[int, ...]) -> bool:
    """Does ``version`` satisfy every clause of ``spec`` (``">=1.7,<2.4"``)?"""
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        for op in (">=", "<=", "==", "!=", ">", "<"):
            if clause.startswith(op):
                bound = parse_version(clause[len(op):])
                have = version[: len(bound)] if op in ("==", "!=") else version
                ok = {">=": have >= bound, "<=": have <= bound, "==": have == bound,
                      "!=": have != bound, ">": have > bound, "<": have < bound}[op]
                if not ok:
                    return False
                break
        else:
            raise ValueError(f"bad version specifier: {clause!r}")
    return True


def at_least(version: tuple[int, ...], text: str) -> bool:
    """``version`` is ``text`` or newer: ``at_least((2, 1), "2.0")``."""
    return version >= parse_version(text)
