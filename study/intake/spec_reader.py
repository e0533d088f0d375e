"""YAML and ``--set`` overrides → a validated :class:`~trainables.schema.spec.StudySpec`: the schema's own rules first,
then :mod:`study.intake.validation`'s registry-backed ones. Every error is one line naming its source and key."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from study.intake.validation import validate_spec
from study.runtime.storage import read_bytes
from trainables.schema import record as R
from trainables.schema.errors import SpecError
from trainables.schema.plain_text import control_character
from trainables.schema.spec import StudySpec
from trainables.schema.trial import set_path, spec_error

__all__ = ["load_spec", "load_study", "read_raw", "parse_spec", "apply_overrides"]


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a key written twice (PyYAML keeps the last silently).

    YAML's merge key (``<<: *base`` or ``<<: [*a, *b]``) is standard YAML and is accepted, with its meaning: a key
    the mapping writes itself overrides a merged one, and an earlier mapping of a merge list overrides a later one.
    Only the keys a mapping writes itself are checked for duplicates. The merge is done here rather than by PyYAML
    6.0's :meth:`flatten_mapping`, which keeps a merged mapping's *merged* value over its own override when that
    mapping is merged again (``mid: &mid {<<: *base, x: 2}``, ``top: {<<: *mid}`` gives ``top.x`` from ``base``)."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        own, merged = [], []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:value":  # a key written "=": a string, as in PyYAML
                key_node.tag = "tag:yaml.org,2002:str"
            if key_node.tag != _MERGE_TAG:
                own.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise yaml.constructor.ConstructorError(
                        "while merging a mapping",
                        node.start_mark,
                        f"<< takes a mapping, not {source.id}",
                        source.start_mark,
                    )
                self.flatten_mapping(source)
                merged += source.value
        _refuse_duplicates(self, own)
        if merged:
            node.value = _first_of_each_key(self, own + merged)


def _keys(loader: yaml.SafeLoader, pairs: list[tuple[Any, Any]]) -> list[Any]:
    return [loader.construct_object(key_node, deep=True) for key_node, _ in pairs]


def _refuse_duplicates(loader: yaml.SafeLoader, pairs: list[tuple[Any, Any]]) -> None:
    """Raise on a key written twice among a mapping's own ``pairs``."""
    seen: set[Any] = set()
    for (key_node, _), key in zip(pairs, _keys(loader, pairs), strict=True):
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the base class says so
            return
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)


def _first_of_each_key(loader: yaml.SafeLoader, pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``pairs`` (a mapping's own, then its merged ones in precedence order) with each key's first pair only."""
    kept, seen = [], set()
    for pair, key in zip(pairs, _keys(loader, pairs), strict=True):
        try:
            if key in seen:
                continue
            seen.add(key)
        except TypeError:  # unhashable: the base class says so when it builds the mapping
            pass
        kept.append(pair)
    return kept


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set dotted.key=value`` overrides; values are parsed as YAML and typed by the schema."""
    tree = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        # A control character, as typed or from a YAML escape ("a\nb"), would end a line of the job script or of a
        # log that quotes the value. (The value is not echoed: it may be a URL with a password.)
        _refuse_control(key, text)
        try:
            value = _load_yaml(text)
        except yaml.YAMLError as e:
            raise SpecError(f"--set {key}: cannot parse the value as YAML ({_yaml_problem(e)})") from None
        for string in _strings(value):
            _refuse_control(key, string)
        set_path(tree, tuple(key.split(".")), value, f"--set {key}")
    return tree


def _refuse_control(key: str, text: str) -> None:
    if (bad := control_character(text)) is not None:
        raise SpecError(f"--set {key}: the value holds the control character {bad} (a value is one line)")


def _strings(value: Any) -> list[str]:
    """Every string in a parsed YAML value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _yaml_line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's problem, on one line, without the snippet of the document it quotes (it may hold a secret)."""
    return " ".join(str(getattr(e, "problem", None) or type(e).__name__).split())


def parse_spec(raw: Any, source: str = "spec", *, family_rules: bool = True) -> StudySpec:
    """Validate a raw mapping; raise :class:`SpecError` with one line naming ``source`` and the first bad key.

    ``family_rules=False`` skips the family's own rules (see :func:`~study.intake.validation.validate_spec`)."""
    if not isinstance(raw, dict):
        raise SpecError(f"the spec must be a YAML mapping, got {type(raw).__name__}", source=source)
    try:
        spec = StudySpec.model_validate(raw)
        validate_spec(spec, family_rules=family_rules)
    except ValidationError as e:
        raise spec_error(e).within(source) from None
    except SpecError as e:
        raise e.within(source) from None
    return spec


def load_spec(path: str | Path, overrides: list[str] | None = None, *, family_rules: bool = True) -> StudySpec:
    """Read, override and validate a YAML spec file (``family_rules``: see :func:`parse_spec`)."""
    raw = read_raw(path, overrides)
    return parse_spec(raw, str(path), family_rules=family_rules)


def read_raw(path: str | Path, overrides: list[str] | None = None) -> Any:
    """A YAML spec file as a mapping with ``--set`` overrides applied (not yet validated); one-line errors."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"cannot read spec ({e.strerror or type(e).__name__})", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise SpecError(f"not UTF-8 text (byte {e.start}); a spec is a YAML file", source=str(path)) from None
    return _parse_text(text, str(path), overrides)


def _parse_text(text: str, source: str, overrides: list[str] | None) -> Any:
    try:
        raw = _load_yaml(text)
    except yaml.YAMLError as e:
        raise SpecError(f"invalid YAML{_yaml_line(e)}: {_yaml_problem(e)}", source=source) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", source=source) from None
    if raw is None:
        raise SpecError("the file is empty; a spec is a YAML mapping with at least name and family", source=source)
    if isinstance(raw, dict):
        raw = apply_overrides(raw, overrides or [])
    return raw


def load_study(study: str | Path, overrides: list[str] | None = None, *, family_rules: bool = True) -> StudySpec:
    """A study named the way every command names one: its spec file, or its directory (``storage/<name>/``, a local
    path or an object-store URI such as ``s3://bucket/runs/<name>``).

    A directory is read through the ``spec.yaml`` it holds, with ``storage`` pointed at the directory's parent, so
    the study is found where it lies even when it was started from elsewhere (a relative ``storage``) or moved.
    """
    if "://" in str(study):
        return _load_remote_study(str(study), overrides, family_rules)
    path = Path(study)
    if not path.is_dir():
        if not path.exists():
            raise SpecError("no such spec file or study directory", source=str(study))
        return load_spec(path, overrides, family_rules=family_rules)
    spec_file = path / R.SPEC_FILE
    if not spec_file.is_file():
        raise SpecError(f"a study directory holds {R.SPEC_FILE}, this one does not", source=str(study))
    spec = load_spec(spec_file, overrides, family_rules=family_rules)
    folder = path.resolve()
    if folder.name != spec.name:
        raise SpecError(f"the directory of study {spec.name!r} is named after it; this one is not", source=str(study))
    return spec.model_copy(update={"storage": str(folder.parent)})


def _load_remote_study(root: str, overrides: list[str] | None, family_rules: bool) -> StudySpec:
    """:func:`load_study` for a study directory on object storage (``s3://bucket/prefix/<name>``)."""
    root = root.rstrip("/")
    spec_file = f"{root}/{R.SPEC_FILE}"
    try:
        data = read_bytes(spec_file)
    except OSError as e:
        raise SpecError(f"cannot read {R.SPEC_FILE} ({' '.join(str(e).split())[:300]})", source=root) from None
    if data is None:
        raise SpecError(f"a study directory holds {R.SPEC_FILE}, this one does not", source=root)
    raw = _parse_text(data.decode("utf-8", errors="replace"), spec_file, overrides)
    spec = parse_spec(raw, spec_file, family_rules=family_rules)
    parent, _, name = root.rpartition("/")
    if name != spec.name:
        raise SpecError(f"the directory of study {spec.name!r} is named after it; this one is not", source=root)
    return spec.model_copy(update={"storage": parent})
