"""``python -m harness.spec_reference --check | --write``: the spec guide's key table, generated from the schema.

``docs/guide/spec.md`` holds, between :data:`START` and :data:`END`, one table per top-level section of a spec: every
dotted key of :class:`~trainables.schema.spec.StudySpec` and :class:`~trainables.schema.table.TableSpec`, its type,
default, allowed values or range, and one line of description. Everything is read from the pydantic models at run
time (``model_fields``: annotations, ``Literal`` values, unions, discriminated unions of sections, constraints such
as ``ge``/``lt``/``pattern``, defaults), and each description from the field's ``description``, else the ``#:``
comment or docstring the source gives the field, else the first sentence of its section's class docstring, else
its line in :data:`NOTES` (for the fields the schema does not describe yet). So a key added to the schema, a changed
default or bound, is in the table at the next ``--write``, and ``tests/docs/test_spec_reference.py`` fails until it
is.

Keys are dotted paths; ``<name>`` stands for any key of a mapping the spec names itself (a search-space parameter,
an arm), ``[]`` for each item of a list. A key of a discriminated union of sections (``search.space.<name>.low``)
says in its description which kinds take it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import functools
import inspect
import itertools
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trainables.schema.spec import StudySpec
from trainables.schema.table import TableSpec

__all__ = [
    "START",
    "END",
    "GUIDE",
    "Row",
    "rows",
    "all_rows",
    "render",
    "stale_notes",
    "stale_message",
    "NOTES",
    "generated_block",
    "uncovered_keys",
    "main",
]

START = "<!-- spec-reference:start -->"
END = "<!-- spec-reference:end -->"
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "spec.md"

#: A key segment that stands for any key of a mapping the spec names itself, and one for each item of a list.
ANY_KEY = "<name>"
ITEM = "[]"


@dataclass(frozen=True)
class Row:
    """One key of the reference: ``key`` its segments, ``spec`` which spec has it (``study``, ``table``, ``both``)."""

    key: tuple[str, ...]
    type: str
    default: str
    allowed: str
    description: str
    spec: str = "both"

    @property
    def dotted(self) -> str:
        return ".".join(self.key).replace("." + ITEM, ITEM)


# ------------------------------------------------------------------------------------------------ types


def _members(tp: Any) -> list[Any]:
    """The members of a union (``X | Y``, ``Optional``), each member's ``Annotated`` kept; a non-union is one member."""
    inner = _strip_annotated(tp)[0]
    if typing.get_origin(inner) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(inner) for m in _members(arg)]
    return [tp]


def _strip_annotated(tp: Any) -> tuple[Any, list[Any]]:
    """``Annotated[T, m1, m2]`` → ``(T, [m1, m2])``, nested ``Annotated`` flattened; a FieldInfo gives its metadata."""
    metadata: list[Any] = []
    while typing.get_origin(tp) is typing.Annotated:
        tp, *extra = typing.get_args(tp)
        for item in extra:
            metadata.extend([item, *item.metadata] if isinstance(item, FieldInfo) else [item])
    return tp, metadata


def _is_model(tp: Any) -> typing.TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


@functools.cache
def _variants(model: type[BaseModel]) -> tuple[type[BaseModel], ...]:
    """The classes a field typed ``model`` validates as: ``model`` itself, or, for a base whose schema is a union of
    its kinds (a ``__get_pydantic_core_schema__`` that returns one), each kind, read from pydantic's core schema."""
    schema = TypeAdapter(model).core_schema
    definitions = {d["ref"]: d for d in schema.get("definitions", []) if "ref" in d}
    found = _schema_classes(schema, definitions)
    return tuple(found) if found else (model,)


def _schema_classes(node: Any, definitions: dict[str, Any]) -> list[type[BaseModel]]:
    """The model classes a core-schema node validates as (through wrappers, references and unions)."""
    kind = node.get("type")
    if kind == "model":
        return [node["cls"]]
    if kind == "definition-ref":
        return _schema_classes(definitions[node["schema_ref"]], definitions)
    if kind in ("tagged-union", "union"):
        choices = node["choices"].values() if isinstance(node["choices"], dict) else node["choices"]
        choices = [c[0] if isinstance(c, tuple) else c for c in choices]
        return [cls for choice in choices for cls in _schema_classes(choice, definitions)]
    inner = node.get("schema")
    return _schema_classes(inner, definitions) if isinstance(inner, dict) else []


def _literal_values(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else ()


def _type_name(tp: Any) -> str:
    """A short name of a (non-union) type for the reader of a YAML file."""
    tp = _strip_annotated(tp)[0]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if values := _literal_values(tp):
        return " or ".join(dict.fromkeys(_scalar_name(type(v)) for v in values))
    if _is_model(tp):
        return "mapping"
    if origin in (list, tuple, set, frozenset):
        return f"list of {_union_name(args[0])}"
    if origin is dict:
        return f"mapping of name → {_union_name(args[1])}"
    if origin in (typing.Union, types.UnionType):
        return _union_name(tp)
    return _scalar_name(tp)


def _scalar_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("NoneType", "null")


def _union_name(tp: Any) -> str:
    return " or ".join(dict.fromkeys(_type_name(m) for m in _members(tp)))


# ------------------------------------------------------------------------------------------------ values


def _yaml(value: Any) -> str:
    """``value`` as it would be written in a spec (flow style)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return value if value and not re.search(r"[:{}\[\],#&*!|>'\"%@`]|^\s|\s$", value) else json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


#: A constraint's class, the attribute that holds its value, and how it reads.
_BOUNDS = ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"), (at.Lt, "lt", "<"))


def _bounds(metadata: list[Any], type_name: str) -> list[str]:
    """What the constraints in ``metadata`` allow, in words: ``≥ 0``, ``< 1``, ``at most 128 characters``."""
    unit = "characters" if type_name.startswith("str") else "items"
    out: list[str] = []
    for item in metadata:
        out += [f"{sign} {_number(getattr(item, attr))}" for kind, attr, sign in _BOUNDS if isinstance(item, kind)]
        if isinstance(item, at.MultipleOf):
            out.append(f"a multiple of {_number(item.multiple_of)}")
        if isinstance(item, at.MinLen) and item.min_length:
            out.append("non-empty" if item.min_length == 1 else f"at least {item.min_length} {unit}")
        if isinstance(item, at.MaxLen):
            out.append(f"at most {item.max_length} {unit}")
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"matches `{pattern}`")
    return list(dict.fromkeys(out))


def _allowed(tp: Any, metadata: list[Any]) -> str:
    """The allowed values (a ``Literal``'s, anywhere in the union) and the range of a field."""
    values: list[str] = []
    constraints = list(metadata)
    for member in _members(tp):
        inner, extra = _strip_annotated(member)
        constraints += extra
        values += [f"`{_yaml(v)}`" for v in _literal_values(inner)]
    parts = [", ".join(dict.fromkeys(values))] if values else []
    return "; ".join(parts + _bounds(constraints, _type_name(tp)))


# ------------------------------------------------------------------------------------------------ descriptions


def _one_line(text: str) -> str:
    """The first sentence of ``text`` on one line, reST roles turned into Markdown code, issue numbers dropped."""
    text = " ".join(textwrap.dedent(text).split())
    text = re.sub(r":(?:class|func|meth|attr|mod|data):`~(?:[\w.]+\.)?([^`]+)`", r"`\1`", text)
    text = re.sub(r":(?:class|func|meth|attr|mod|data):`([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    text = re.sub(r"\s*\(issues? \d+[^)]*\)", "", text)
    match = re.search(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)\.\s+(?=[A-Z`(*])", text)
    return (text[: match.start() + 1] if match else text).strip()


@functools.cache
def _source_docs(cls: type) -> dict[str, str]:
    """Each annotated attribute's ``#:`` comment (the lines just above it) or docstring (the string just below)."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
    body = tree.body if isinstance(tree, ast.ClassDef) else []
    docs: dict[str, str] = {}
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#:"):
            above.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        following = body[i + 1] if i + 1 < len(body) else None
        if above:
            docs[node.target.id] = " ".join(above)
        elif isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
            docs[node.target.id] = str(following.value.value)
    return docs


def _declaring(model: type[BaseModel], name: str) -> type:
    """The class in ``model``'s MRO whose body declares field ``name``."""
    return next(cls for cls in model.__mro__ if name in getattr(cls, "__annotations__", {}))


def _field_doc(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    """The field's description, else its ``#:`` comment or docstring, else its line in :data:`NOTES`."""
    if field.description:
        return _one_line(field.description)
    cls = _declaring(model, name)
    return _one_line(_source_docs(cls).get(name, "")) or NOTES.get(f"{cls.__name__}.{name}", "")


def _own_doc(model: type) -> str:
    doc = model.__dict__.get("__doc__")
    return _one_line(doc) if isinstance(doc, str) else ""


def _class_doc(tp: Any) -> str:
    """A section's line: its class docstring's first sentence, else its line in :data:`NOTES`."""
    models = [_strip_annotated(m)[0] for m in _members(tp)]
    models = [m for m in models if _is_model(m)]
    if len(models) != 1:
        return ""
    return _own_doc(models[0]) or NOTES.get(models[0].__name__, "")


#: One line for each key the schema gives no description of (a field's ``description``, ``#:`` comment or docstring
#: wins over this). A key that no longer exists, or that the schema has since described, fails
#: ``tests/docs/test_spec_reference.py``: the line then moves into the schema or goes.
NOTES: dict[str, str] = {
    "StudySpec.name": "The study's name: its Ray experiment, Optuna study, MLflow experiment and `storage/<name>/`.",
    "TableSpec.name": "The table's name: `storage/<name>/`, and the prefix of each cell's study name.",
    "StudySpec.family": "The loss family (`trainables/families/<family>/`; the guide [Add a loss family](families.md)).",
    "StudySpec.seed": "Model initialisation and batch sampling; searchable as `seed`.",
    "TableSpec.seed": "Model initialisation and batch sampling, the same in every cell.",
    "StudySpec.storage": "Where the study lives: a directory, or a pyarrow filesystem URI (`s3://…`, `gs://…`).",
    "TableSpec.storage": "Where the table and its cells' studies live: a directory, or a filesystem URI.",
    "TableSpec.arms": "The table's rows: arm name → its family, fixed params and own search space.",
    "ArmSpec.family": "The arm's loss family (each family in one arm only).",
    "ArmSpec.params": "The arm's fixed hyperparameters: its family's (bare names) and the optimiser's step knobs.",
    "ArmSpec.space": "The arm's own search space, as `search.space` (the same kinds and keys).",
    "TableSpec.extra_cells": "Cells beyond the grid, for some arms only.",
    "ExtraCell.arms": "The arms that get this cell.",
    "ExtraCell.set": "The cell's condition: `dataset.noise.*` and `dataset.subset` keys with their values.",
    "DatasetSpec": "What the trials train and are tested on.",
    "DatasetSpec.name": "`digits`, `glyphs`, `cub200`, `cars196`, `sop`, `inshop`, `flowers102`, `cifar10`, "
    "`imagefolder` or `csv`.",
    "NoiseSpec.kind": "How the noisy labels are drawn: per sample within a class, uniformly, by dissolving small "
    "classes, or from a published list.",
    "NoiseSpec.ratio": "The noise rate (per sample; per class for `small_cluster`; the published rate for `file`).",
    "NoiseSpec.seed": "Seed of the noise draw (`final.reseed_noise` draws it again per final seed).",
    "NoiseSpec.file": "`file` only: the published noisy-label list (made absolute when the spec loads).",
    "ModelSpec": "The embedding network.",
    "ModelSpec.backbone": "`small_cnn`, `resnet18`, `resnet34`, `resnet50` or `googlenet`.",
    "ModelSpec.embedding_dim": "Size of the embedding the loss sees.",
    "TrainSpec": "The training budget and optimiser of every trial and final run.",
    "TrainSpec.epochs": "Epochs of each trial and each final run.",
    "TrainSpec.eval_batch_size": "Batch size of the evaluation passes (no effect on results).",
    "TrainSpec.recall_at": "The k of the reported Recall@k (sorted, each once).",
    "OptimizerSpec": "The optimiser.",
    "OptimizerSpec.name": "The optimiser's kind.",
    "OptimizerSpec.lr": "Learning rate (a family's own parameter groups keep their ratio to it).",
    "OptimizerSpec.weight_decay": "Weight decay.",
    "OptimizerSpec.momentum": "`sgd` only: momentum.",
    "LrScheduleSpec.type": "`none` keeps the lr; `step` multiplies it by `gamma` at each milestone; `cosine` anneals "
    "it to `lr·min_factor`.",
    "LrScheduleSpec.milestones": "`step`: the epochs after which the lr is multiplied by `gamma`.",
    "LrScheduleSpec.gamma": "`step`: the factor at each milestone.",
    "LrScheduleSpec.min_factor": "`cosine`: the last epoch's lr as a share of `lr`.",
    "TrainSpec.num_workers": "Data-loader worker processes per trial (0: in the trial's own process).",
    "SearchSpec": "The hyperparameter search: its budget, objective, sampler, scheduler and space.",
    "SearchSpec.num_trials": "Trials of the search.",
    "TableSearchSpec.num_trials": "Trials of each cell's search, the same for every arm.",
    "SearchSpec.max_concurrent": "Trials running at once.",
    "SearchSpec.mode": "Whether a higher (`max`) or a lower (`min`) `metric` is better.",
    "TableSearchSpec.mode": "Whether a higher (`max`) or a lower (`min`) `metric` is better.",
    "MeanLast.mean_last": "k: a trial is ranked by the mean of its last k epochs.",
    "SchedulerSpec.type": "The kind of early stopping: `fifo` runs every trial to the end.",
    "SamplerSpec.seed": "The sampler's seed (`null`: unseeded, not reproducible).",
    "SearchSpec.space": "Parameter name (a family hyperparameter, or a dotted spec path) → its range.",
    "FloatParam.type": "The parameter's kind (Optuna's distributions).",
    "FloatParam.low": "Lower bound, inclusive (`log: true`: above 0).",
    "IntParam.low": "Lower bound, inclusive (`log: true`: above 0).",
    "FloatParam.high": "Upper bound, inclusive.",
    "IntParam.high": "Upper bound, inclusive.",
    "FloatParam.log": "Sample on a log scale (without `step`).",
    "IntParam.log": "Sample on a log scale (without `step`).",
    "FloatParam.step": "Spacing of the values from `low` (`null`: continuous).",
    "IntParam.step": "Spacing of the values from `low`.",
    "CategoricalParam.choices": "The values to choose from.",
    "ValidationSpec.kind": "Class-disjoint `kfold`, one `holdout` group, or `none` (select on the test classes).",
    "ValidationSpec.folds": "`kfold`: the class-disjoint folds; a trial trains one model per fold.",
    "ValidationSpec.fraction": "`holdout`: the share of the training classes held out.",
    "ValidationSpec.labels": "Score validation with the observed labels (`noisy`) or the true ones (`clean`, an "
    "oracle).",
    "FinalSpec.seeds": "Seeds the best configuration is retrained with on all training classes (0: no final stage).",
    "TableFinalSpec.seeds": "Seeds each cell's best configuration is retrained with on all training classes.",
    "FinalSpec.group_by": "Search-space entries that are conditions: the best configuration is chosen per combination.",
    "FinalSpec.reseed_noise": "Final seed s also draws the label noise with seed s.",
    "TableFinalSpec.reseed_noise": "Final seed s also draws the label noise with seed s (on by default in a table).",
    "RaceSpec.finalists": "The best trials of each cell that race.",
    "RaceSpec.seeds": "More seeds each finalist is retrained with, on the validation classes.",
    "DiagnosticsSpec.every": "Score the noise detectors every n epochs (0: off).",
    "ResourcesSpec.cpu": "CPUs per trial (fractions allowed).",
    "ResourcesSpec.gpu": "GPUs per trial (fractions share a GPU).",
    "TrackingSpec": "The two stores: MLflow (runs and metrics) and Optuna (the search's trials).",
}


# ------------------------------------------------------------------------------------------------ the walk


def rows(model: type[BaseModel], spec: str = "both") -> list[Row]:
    """Every key of ``model`` (a spec or one of its sections), depth first in the schema's order."""
    return list(_model_rows(model, (), None, spec))


def _model_rows(model: type[BaseModel], prefix: tuple[str, ...], instance: Any, spec: str) -> Iterator[Row]:
    for name, field in model.model_fields.items():
        default = _default(field, instance, name)
        tp = field.annotation
        metadata = list(field.metadata)
        doc = _field_doc(model, name, field) or _class_doc(tp)
        yield from _field_rows(prefix + (name,), tp, metadata, default, (doc, spec))


def _default(field: FieldInfo, instance: Any, name: str) -> Any:
    """The value a key takes when the spec leaves it out: from the enclosing section's default when there is one."""
    if isinstance(instance, BaseModel) and name in type(instance).model_fields:
        return getattr(instance, name)
    if field.default is not PydanticUndefined:
        return field.default
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return PydanticUndefined


def _field_rows(
    key: tuple[str, ...], tp: Any, metadata: list[Any], default: Any, doc_spec: tuple[str, str]
) -> Iterator[Row]:
    """The row of one field, then the rows of the sections it holds (a section, a union of them, a mapping or list
    of them)."""
    doc, spec = doc_spec
    shown = "required" if default is PydanticUndefined else ("" if isinstance(default, BaseModel) else _yaml(default))
    yield Row(key, _union_name(tp), shown, _allowed(tp, metadata), doc, spec)
    yield from _nested_rows(key, tp, default, spec)


def _nested_rows(key: tuple[str, ...], tp: Any, default: Any, spec: str) -> Iterator[Row]:
    members = [m for m in _members(tp) if _is_model(_strip_annotated(m)[0])]
    variants = [(cls, m) for m in members for cls in _variants(_strip_annotated(m)[0])]
    if len(variants) == 1:
        yield from _model_rows(variants[0][0], key, default, spec)
    elif variants:
        yield from _variant_rows(key, variants, default, (spec, [_strip_annotated(m)[0] for m in members]))
    for member in _members(tp):
        inner = _strip_annotated(member)[0]
        origin, args = typing.get_origin(inner), typing.get_args(inner)
        if origin is dict and _has_model(args[1]):
            yield from _nested_rows(key + (ANY_KEY,), args[1], PydanticUndefined, spec)
        elif origin in (list, tuple) and args and _has_model(args[0]):
            yield from _nested_rows(key + (ITEM,), args[0], PydanticUndefined, spec)


def _has_model(tp: Any) -> bool:
    return any(_is_model(_strip_annotated(m)[0]) for m in _members(tp))


def _tag(model: type[BaseModel], member: Any, discriminator: str | None) -> str:
    """A variant's name: its discriminator's value, else a ``Tag`` on it, else its class name."""
    field = model.model_fields.get(discriminator or "")
    values = _literal_values(_strip_annotated(field.annotation)[0]) if field else ()
    if values:
        return ", ".join(f"`{_yaml(v)}`" for v in values)
    tag = next((getattr(m, "tag", None) for m in _strip_annotated(member)[1] if hasattr(m, "tag")), None)
    return f"`{tag}`" if tag else model.__name__


def _discriminator(models: list[type[BaseModel]]) -> str | None:
    """The field every variant has as a ``Literal``: the one that picks the variant."""
    names = [n for n, f in models[0].model_fields.items() if _literal_values(_strip_annotated(f.annotation)[0])]
    for name in names:
        if all(name in m.model_fields and _literal_values(m.model_fields[name].annotation) for m in models):
            return name
    return None


def _variant_rows(
    key: tuple[str, ...], variants: list[tuple[type[BaseModel], Any]], default: Any, spec_bases: tuple[str, list[type]]
) -> Iterator[Row]:
    """The keys of a union of sections, each once where every variant that has it agrees, with the variants that
    take it named in its description; the discriminator once, with every variant's value. ``variants``: each
    section class with the union member it came from; ``spec_bases``: the spec kind, and the classes the field names
    (a base whose kinds form the union describes the discriminator for all of them)."""
    spec, bases = spec_bases
    models = [model for model, _ in variants]
    discriminator = _discriminator(models)
    grouped: dict[tuple[str, ...], list[tuple[str, Row]]] = {}
    for model, member in variants:
        instance = default if isinstance(default, model) else None
        for row in _model_rows(model, key, instance, spec):
            grouped.setdefault(row.key, []).append((_tag(model, member, discriminator), row))
    for row_key, found in grouped.items():
        if discriminator is not None and row_key == key + (discriminator,):
            yield _discriminator_row(found, default, discriminator, _base_doc(bases, discriminator))
            continue
        by_content: dict[Row, list[str]] = {}
        for tag, row in found:
            by_content.setdefault(row, []).append(tag)
        for row, tags in by_content.items():
            doc = (
                row.description[:1].lower() + row.description[1:] if row.description[1:2].islower() else row.description
            )
            only = f"{', '.join(tags)} only" + (f": {doc}" if doc else ".")
            yield row if len(tags) == len(models) else replace(row, description=only)


def _base_doc(bases: list[type], name: str) -> str:
    """The description a base class of the union gives its field ``name`` (the discriminator)."""
    for base in bases:
        if issubclass(base, BaseModel) and name in base.model_fields:
            return _field_doc(base, name, base.model_fields[name])
    return ""


def _discriminator_row(found: list[tuple[str, Row]], default: Any, name: str, base_doc: str) -> Row:
    first = found[0][1]
    shown = _yaml(getattr(default, name)) if isinstance(default, BaseModel) else "required"
    allowed = ", ".join(tag for tag, _ in found)
    docs = [row.description for _, row in found if row.description]
    doc = base_doc or (docs[0] if docs else "The kind: it decides which of the keys below apply.")
    return replace(first, default=shown, allowed=allowed, description=doc)


# ------------------------------------------------------------------------------------------------ both specs


def all_rows() -> list[Row]:
    """The rows of both specs: a key whose row is the same in both once (``both``), else once per spec."""
    study, table = rows(StudySpec, "study"), rows(TableSpec, "table")
    content = {replace(r, spec="both") for r in study} & {replace(r, spec="both") for r in table}
    merged: list[Row] = []
    for row in _interleave(study, table):
        same = replace(row, spec="both")
        row = same if same in content else row
        if row not in merged:
            merged.append(row)
    return merged


def _interleave(study: list[Row], table: list[Row]) -> list[Row]:
    """Both specs' rows in one order: the study's keys in the schema's order, each table-only key right after the
    key the table has before it; a key's study row before its table row."""
    order = list(dict.fromkeys(r.key for r in study))
    previous: tuple[str, ...] | None = None
    for key in dict.fromkeys(r.key for r in table):
        if key not in order:
            order.insert(order.index(previous) + 1 if previous is not None else 0, key)
        previous = key
    rank = {key: i for i, key in enumerate(order)}
    return sorted(study + table, key=lambda r: (rank[r.key], r.spec != "study"))


def _models(tp: Any, seen: dict[str, type[BaseModel]]) -> dict[str, type[BaseModel]]:
    """Every section class reachable from ``tp``, by class name."""
    for member in _members(tp):
        inner = _strip_annotated(member)[0]
        for model in _variants(inner) + (inner,) if _is_model(inner) else ():
            if model.__name__ not in seen:
                seen[model.__name__] = model
                for field in model.model_fields.values():
                    _models(field.annotation, seen)
        for arg in typing.get_args(inner) if typing.get_origin(inner) in (list, tuple, dict) else ():
            _models(arg, seen)
    return seen


def stale_notes() -> list[str]:
    """Lines of :data:`NOTES` that name no section or field of either spec, or that the schema now describes itself."""
    models = _models(StudySpec | TableSpec, {})
    stale: list[str] = []
    for name in NOTES:
        owner, _, field = name.partition(".")
        model = models.get(owner)
        if model is None or (field and field not in model.model_fields):
            stale.append(f"{name}: no such section or field")
        elif field and (model.model_fields[field].description or _source_docs(_declaring(model, field)).get(field)):
            stale.append(f"{name}: the schema describes it now")
        elif not field and _own_doc(model):
            stale.append(f"{name}: the schema describes it now (its docstring)")
    return stale


# ------------------------------------------------------------------------------------------------ Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def render(table_rows: list[Row]) -> str:
    """The Markdown between the markers: the top-level keys, then one table per section."""
    sections = list(dict.fromkeys(r.key[0] for r in table_rows if len(r.key) > 1))
    top = [r for r in table_rows if r.key[0] not in sections]
    parts = ["### Top level\n", _table(top)]
    for section in sections:
        parts += [f"\n### `{section}`\n", _table([r for r in table_rows if r.key[0] == section])]
    return "\n".join(parts)


def _table(table_rows: list[Row]) -> str:
    lines = ["| key | spec | type | default | allowed | description |", "|---|---|---|---|---|---|"]
    for r in table_rows:
        cells = (_code(r.dotted), r.spec, r.type, _code(r.default) if r.default != "required" else "required")
        lines.append("| " + " | ".join(_cell(c) for c in (*cells, r.allowed, r.description)) + " |")
    return "\n".join(lines)


def generated_block() -> str:
    """What sits between the markers of ``docs/guide/spec.md``, markers included."""
    note = "<!-- generated from the schema by python -m harness.spec_reference --write: edit the schema, not this -->"
    return f"{START}\n{note}\n\n{render(all_rows())}\n\n{END}"


def stale_message(current: str, wanted: str, lines: int = 30) -> str:
    """What a stale table says: the command that regenerates it, then the first lines of the difference."""
    diff = difflib.unified_diff(
        current.splitlines(), wanted.splitlines(), "docs/guide/spec.md", "the schema", lineterm=""
    )
    shown = list(itertools.islice(diff, lines))
    return (
        "docs/guide/spec.md: the key table is not what the schema says; regenerate it with\n"
        "    python -m harness.spec_reference --write\n" + "\n".join(shown)
    )


def _current(text: str) -> str | None:
    begin, end = text.find(START), text.find(END)
    return text[begin : end + len(END)] if 0 <= begin < end else None


# ------------------------------------------------------------------------------------------------ coverage


def uncovered_keys(data: Any, table_rows: list[Row] | None = None) -> list[str]:
    """The dotted keys of a spec (as YAML loads it) that no row of the reference names."""
    patterns = [r.key for r in (table_rows if table_rows is not None else all_rows())]
    prefixes = {p[:i] for p in patterns for i in range(1, len(p) + 1)}
    missing: list[str] = []
    _walk(data, (), prefixes, missing)
    return missing


def _matches(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    return len(path) == len(pattern) and all(p == q or q == ANY_KEY for p, q in zip(path, pattern, strict=True))


def _walk(data: Any, path: tuple[str, ...], prefixes: set[tuple[str, ...]], missing: list[str]) -> None:
    if path:
        known = [p for p in prefixes if _matches(path, p)]
        if not known:
            missing.append(".".join(path).replace("." + ITEM, ITEM))
            return
        if not any(len(q) > len(path) and _matches(path, q[: len(path)]) for q in prefixes):
            return  # a leaf: its value (a free-form mapping included) is the key's
    if isinstance(data, dict):
        for key, value in data.items():
            _walk(value, (*path, str(key)), prefixes, missing)
    elif isinstance(data, list) and path:
        for item in data:
            _walk(item, (*path, ITEM), prefixes, missing)


# ------------------------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    """``--check``: exit 1 with a line when the guide's table is not what the schema gives; ``--write``: rewrite it."""
    parser = argparse.ArgumentParser(prog="python -m harness.spec_reference", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/guide/spec.md's table is stale")
    mode.add_argument("--write", action="store_true", help="rewrite the table between the markers")
    args = parser.parse_args(argv)
    text = GUIDE.read_text()
    current, wanted = _current(text), generated_block()
    if current is None:
        print(f"error: {GUIDE} has no {START!r} … {END!r} markers", file=sys.stderr)
        return 2
    if args.write:
        GUIDE.write_text(text.replace(current, wanted))
        print(f"wrote docs/guide/spec.md: {len(all_rows())} rows")
        return 0
    if current != wanted:
        print(stale_message(current, wanted))
        return 1
    print(f"docs/guide/spec.md: the key table is the schema's ({len(all_rows())} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
