"""YAML and ``--set`` overrides → a validated :class:`~schema.spec.StudySpec`: the schema's own rules first,
then :mod:`study.validation`'s registry-backed ones. Every error is one line naming its source and key."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from schema.errors import SpecError
from schema.spec import StudySpec
from schema.trial import set_path, spec_error
from study.validation import validate_spec

__all__ = ["load_spec", "parse_spec", "apply_overrides"]


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set dotted.key=value`` overrides; values are parsed as YAML and typed by the schema."""
    tree = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(f"--set {key}: cannot parse value {text!r}") from e
        set_path(tree, tuple(key.split(".")), value, f"--set {key}")
    return tree


def parse_spec(raw: Any, source: str = "spec") -> StudySpec:
    """Validate a raw mapping; raise :class:`SpecError` with one line naming ``source`` and the first bad key."""
    if not isinstance(raw, dict):
        raise SpecError(f"the spec must be a YAML mapping, got {type(raw).__name__}", source=source)
    try:
        spec = StudySpec.model_validate(raw)
        validate_spec(spec)
    except ValidationError as e:
        raise spec_error(e).within(source) from None
    except SpecError as e:
        raise e.within(source) from None
    return spec


def load_spec(path: str | Path, overrides: list[str] | None = None) -> StudySpec:
    """Read, override and validate a YAML spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"cannot read spec ({e.strerror})", source=str(path)) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"invalid YAML{where}: {getattr(e, 'problem', e)}", source=str(path)) from None
    if isinstance(raw, dict):
        raw = apply_overrides(raw, overrides or [])
    return parse_spec(raw, str(path))
