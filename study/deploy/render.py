"""Fill a deploy template (``study/deploy/templates/*.sh``): the one place a value enters a generated script.

A template is a real shell file. Each value it needs stands at a placeholder that declares how the value is written
there, ``{{CONTEXT:name}}``:

==================  ====================================================================================================
``sh``              a shell word: :func:`shlex.quote` (``STUDY_DIR={{sh:study_dir}}``)
``words``           a list of shell words, each quoted, space-separated (``ARGS=({{words:driver_args}})``)
``int``             an integer (not a bool), written in decimal
``comment``         text on a comment line (after ``#``); a control character is written escaped (``\\n``), so the
                    comment stays one line
``sbatch``          the value of an ``#SBATCH --option=`` line, quoted as sbatch reads its script (double quotes,
                    ``\\`` escapes: sbatch ends an unquoted value at white space or ``#``); ``sbatch?`` drops the
                    whole line when the value is ``None``
``sbatch-lines``    a list of sbatch options the user gave (``--mem=64G``): one ``#SBATCH`` line each, as written
``lines``           a list of shell lines the user gave (``--setup``): one line each, as written, run as their own shell
                    (both drop their line when the list is empty)
==================  ====================================================================================================

Every value is refused (:class:`~trainables.schema.errors.SpecError`) when it holds a control character (C0, DEL, C1,
U+2028/U+2029) outside a comment: no value can end its line. ``sbatch``, ``sbatch-lines`` and ``comment`` placeholders
must stand on a line that is one (``#SBATCH`` / ``#``), and the ``*lines`` ones alone on their line. A placeholder
without a value, a value no placeholder takes, an unknown context and any other ``{{`` or ``}}`` in the template are
errors of the template (:class:`TemplateError`), raised before anything is written.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from importlib import resources
from os import PathLike
from typing import Any

from trainables.schema.errors import SpecError
from trainables.schema.plain_text import control_character

__all__ = ["TemplateError", "fill", "load_template", "sbatch_quote", "comment_text", "CONTEXTS"]

#: ``{{context:name}}`` (``sbatch?`` for an optional ``#SBATCH`` line).
_PLACEHOLDER = re.compile(r"\{\{([a-z-]+\??):([a-z_][a-z0-9_]*)\}\}")
CONTEXTS = ("sh", "words", "int", "comment", "sbatch", "sbatch?", "sbatch-lines", "lines")
#: A value sbatch reads as written (no quotes needed): nothing it treats specially, no white space.
_SBATCH_PLAIN = re.compile(r"[A-Za-z0-9_.,:/@%+=-]+")


class TemplateError(AssertionError):
    """A template and the values given for it do not fit: a bug of the template or its caller, not bad input."""


def load_template(name: str) -> str:
    """The text of ``study/deploy/templates/NAME`` (package data)."""
    return (resources.files("study.deploy") / "templates" / name).read_text(encoding="utf-8")


def _refuse_control(value: str, name: str) -> str:
    if (bad := control_character(value)) is not None:
        raise SpecError(f"holds the control character {bad}: a value of a generated script is one line", name)
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str | PathLike):
        raise TemplateError(f"{{{{...:{name}}}}}: expected text or a path, got {type(value).__name__}")
    return _refuse_control(str(value), name)


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TemplateError(f"{{{{...:{name}}}}}: expected a list, got {type(value).__name__}")
    return [_text(v, name) for v in value]


def sbatch_quote(value: str) -> str:
    """``value`` as sbatch reads it back from an ``#SBATCH`` line (checked on Slurm 22.05: white space, ``#``,
    quotes, ``$``, backticks and unicode survive, in ``--job-name``, ``--chdir`` and ``--output``)."""
    if _SBATCH_PLAIN.fullmatch(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def comment_text(value: str) -> str:
    """``value`` for a comment line: every control character written as its escape (``\\n``, ``\\x00``)."""
    return "".join(c.encode("unicode_escape").decode("ascii") if control_character(c) is not None else c for c in value)


def _render(context: str, name: str, value: Any) -> str:
    if context == "sh":
        return shlex.quote(_text(value, name))
    if context == "words":
        return " ".join(shlex.quote(v) for v in _texts(value, name))
    if context == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise TemplateError(f"{{{{int:{name}}}}}: expected an int, got {type(value).__name__}")
        return str(value)
    if context == "comment":
        if not isinstance(value, str):
            raise TemplateError(f"{{{{comment:{name}}}}}: expected text, got {type(value).__name__}")
        return comment_text(value)
    if context in ("sbatch", "sbatch?"):
        return sbatch_quote(_text(str(value) if isinstance(value, int) else value, name))
    if context == "sbatch-lines":
        return "\n".join(f"#SBATCH {line}" for line in _texts(value, name))
    if context == "lines":
        return "\n".join(_texts(value, name))
    raise TemplateError(f"unknown placeholder context {context!r} (one of {', '.join(CONTEXTS)})")


def _check_line(line: str, context: str, lineno: int) -> None:
    """Where a placeholder may stand: its context needs the line to be a comment, an #SBATCH line, or its own."""
    where = f"template line {lineno}"
    if context in ("sbatch", "sbatch?") and not line.startswith("#SBATCH --"):
        raise TemplateError(f"{where}: an {{{{{context}:...}}}} placeholder stands in an '#SBATCH --option=' line")
    if context == "comment" and not line.lstrip().startswith("#"):
        raise TemplateError(f"{where}: a {{{{comment:...}}}} placeholder stands on a comment line")
    if context in ("lines", "sbatch-lines") and not _PLACEHOLDER.fullmatch(line.strip()):
        raise TemplateError(f"{where}: a {{{{{context}:...}}}} placeholder stands alone on its line")


def fill(template: str, values: Mapping[str, Any]) -> str:
    """``template`` with every placeholder replaced by its value, written for its context (see the module).

    Raises :class:`~trainables.schema.errors.SpecError` (naming the value) for a value unsafe in its context, and
    :class:`TemplateError` when the template and ``values`` do not fit."""
    used: set[str] = set()
    out: list[str] = []
    for lineno, line in enumerate(template.splitlines(keepends=True), start=1):
        stray = _PLACEHOLDER.sub("", line)
        if "{{" in stray or "}}" in stray:
            raise TemplateError(f"template line {lineno}: '{{{{' or '}}}}' outside a {{{{context:name}}}} placeholder")
        placeholders = list(_PLACEHOLDER.finditer(line))
        drop = False
        for m in placeholders:
            context, name = m.groups()
            if context not in CONTEXTS:
                raise TemplateError(f"template line {lineno}: unknown placeholder context {context!r}")
            _check_line(line, context, lineno)
            if name not in values:
                raise TemplateError(f"template line {lineno}: no value for {{{{{context}:{name}}}}}")
            used.add(name)
            value = values[name]
            drop = drop or (context == "sbatch?" and value is None) or (context.endswith("lines") and not value)
        if drop:
            continue
        # One pass over the template's own text: a value is never read again for placeholders.
        out.append(_PLACEHOLDER.sub(lambda m: _render(m.group(1), m.group(2), values[m.group(2)]), line))
    unused = sorted(set(values) - used)
    if unused:
        raise TemplateError(f"values no placeholder takes: {', '.join(unused)}")
    return "".join(out)
