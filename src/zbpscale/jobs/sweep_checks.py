"""Where a sweep file's mistake is: a ConfigError about one keyword of a call (`field_error`), the value checks the
sweep's dataclasses share, and the search for that keyword's line in the sweep file.

Two moments find the line. At load (`load_sweep`), the traceback gives the line of the call that raised, and the
keyword is searched in the calls around it (`field_line`). After load (an executor's check of what this node can
run), there is no traceback: the keyword is searched in the whole file, by the value at fault (`in_sweep_file`).

Light on purpose (ast and zbpscale.errors): the executors import it.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

from zbpscale.errors import ConfigError

ANY = object()
"""field_error's `value` when the value at fault does not tell one call from another."""


def field_error(owner: str, name: str, message: str, hint: str | None = None, *, value=ANY,
                size: str | None = None) -> ConfigError:
    """A ConfigError about the keyword `name` of an `owner(...)` call in a sweep file: load_sweep (and, after load,
    in_sweep_file) points at the line of that keyword. After load, `value` (the keyword's value at fault) picks the
    call among several, and `size` the `Size(name=...)` call to point at when no call gives the keyword."""
    err = ConfigError(message, hint=hint)
    err.field = (owner, name)
    err.value, err.size = value, size
    return err


def need(owner: str, label: str, name: str, value, ok: bool, want: str) -> None:
    if isinstance(value, bool) or not ok:
        raise field_error(owner, name, f"{label}{name} must be {want}, got {value!r}")


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def distinct(values) -> tuple[int, ...]:
    """As many distinct seeds as `values` holds: the first of each, then the smallest unused for each repeat."""
    out = list(dict.fromkeys(values))
    free = (n for n in range(len(values) + len(out)) if n not in out)
    return tuple(out + [next(free) for _ in range(len(values) - len(out))])


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return ANY


def field_line(source: str, line: int, owner: str, name: str) -> int | None:
    """The line of the keyword `name` of an `owner(...)` call (any call where owner is ''), or of a string
    `name` (a `train=((name, value),)` pair), searched in the calls around `line`, innermost first."""
    tree = ast.parse(source)
    around = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= n.end_lineno]
    for call in sorted(around, key=lambda n: (n.end_lineno or n.lineno) - n.lineno):
        for node in ast.walk(call):
            if isinstance(node, ast.Call) and (not owner or _called(node) == owner):
                for kw in node.keywords:
                    if kw.arg == name:
                        return kw.value.lineno
            if isinstance(node, ast.Constant) and node.value == name:
                return node.lineno
    return None


def loaded_field_line(source: str, owner: str, name: str, value=ANY, size: str | None = None) -> int | None:
    """The line of the keyword `name` of an `owner(...)` call anywhere in the file: the first whose literal value is
    `value`, else the only one; without one, the `Size(name=size)` call (the size takes the field's default)."""
    calls = sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)), key=lambda n: n.lineno)
    given = [kw.value for c in calls if _called(c) == owner for kw in c.keywords if kw.arg == name]
    same = [v for v in given if value is not ANY and _literal(v) == value]
    if same or len(given) == 1:
        return (same or given)[0].lineno
    sizes = [c for c in calls if _called(c) == "Size" and size is not None
             and any(kw.arg == "name" and _literal(kw.value) == size for kw in c.keywords)]
    return sizes[0].lineno if sizes and not given else None


def in_sweep_file(path: str | Path, err: ConfigError) -> ConfigError:
    """A field_error raised after load (an executor's check) as load_sweep words one: at the file:line of its field
    in the sweep file `path` (as given); any other error as it is."""
    field = getattr(err, "field", None)
    if field is None:
        return err
    try:
        line = loaded_field_line(Path(path).read_text(), *field, value=getattr(err, "value", ANY),
                                 size=getattr(err, "size", None))
    except (OSError, SyntaxError, ValueError):  # the file changed since it was loaded: name it without a line
        line = None
    return ConfigError(f"{path}:{line}: {err.args[0]}" if line else f"{path}: {err.args[0]}", hint=err.hint)
