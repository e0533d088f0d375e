"""The base every scheduler kind's spec subclasses, and the registry that finds the kinds by name.

A scheduler kind (``search.scheduler.type``) is one module in this folder: a subclass of :class:`SchedulerSpec` whose
``type`` is a ``Literal`` with a default (the kind's name), with its own keys as fields and the rules the rest of the
code asks of it: whether it stops trials early, the expected share of FIFO's model-epochs its search trains, the
ordered sampler's lag it needs, the epochs a trial must checkpoint, its spec check and its description. The Ray
scheduler it builds lives in the module of the same name under ``study/search/schedulers/`` (Ray is not imported
here: validating a spec imports neither Ray nor torch). Adding a kind, such as median stopping, is one module here,
its builder there, and its case in ``tests/study/search/test_scheduler_contract.py``, which holds every kind to this
base.

A field typed :class:`SchedulerSpec` validates as pydantic's tagged union of every registered kind on ``type``, and
``SchedulerSpec(**keys)`` builds the kind its ``type`` names (FIFO by default), as validation does.

Keys another kind takes are not an error where they change nothing: a dumped spec (``spec.yaml``, ``table.yaml``, a
trial's config) states every default, and a FIFO spec may keep a stopping kind's keys ready for ``--set
search.scheduler.type=…``. A FIFO spec keeps them with a one-line note (:meth:`SchedulerSpec.foreign_key`); a
stopping kind refuses another kind's key set to anything but its default, as it always did.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Annotated, Any, ClassVar, Union

from pydantic import (
    Discriminator,
    GetCoreSchemaHandler,
    PrivateAttr,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Tag,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import CoreSchema
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

from trainables.schema._strict import _Strict

__all__ = ["SchedulerSpec", "scheduler_kinds", "kind_named", "note_once"]

#: Every kind by name, filled as each kind's class is created (:meth:`SchedulerSpec.__pydantic_init_subclass__`).
_KINDS: dict[str, type[SchedulerSpec]] = {}
#: The notes printed in this process (each once).
_NOTED: set[str] = set()


def note_once(text: str) -> None:
    """Print ``text`` on stderr, once per process: a spec is validated many times (each trial, each status)."""
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"note: {text}", file=sys.stderr)


def scheduler_kinds() -> dict[str, type[SchedulerSpec]]:
    """Every scheduler kind, name → spec class, found from the modules of this folder (each imported once)."""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        importlib.import_module(f"{package}.{module.name}")
    return dict(sorted(_KINDS.items()))


def kind_named(name: str) -> type[SchedulerSpec]:
    """The spec class of scheduler kind ``name``; :class:`KeyError` naming the kinds there are."""
    kinds = scheduler_kinds()
    if name not in kinds:
        raise KeyError(f"no scheduler kind {name!r}; kinds: {', '.join(kinds)}")
    return kinds[name]


def _kind_of(value: Any) -> str:
    """The kind a spec or its keys name: its ``type``, FIFO where it names none (the default)."""
    return str(value.get("type", "fifo") if isinstance(value, dict) else getattr(value, "type", "fifo"))


def _key_owners() -> dict[str, list[type[SchedulerSpec]]]:
    """Each key a kind takes (``type`` aside) → the kinds that take it, in the registry's order."""
    owners: dict[str, list[type[SchedulerSpec]]] = {}
    for kind in scheduler_kinds().values():
        for key in kind.model_fields:
            if key != "type":
                owners.setdefault(key, []).append(kind)
    return owners


class SchedulerSpec(_Strict):
    """Early stopping, the Ray scheduler's job (time = epochs): ``type`` names the kind (``fifo``: every trial to the
    end; ``asha``; ``halving``), and each kind takes its own keys.

    The base of every kind (module docstring): a subclass sets ``type: Literal["<name>"] = "<name>"`` and its keys,
    and overrides what differs from FIFO.
    """

    type: str = "fifo"

    #: Whether the kind stops trials before ``train.epochs`` (FIFO does not): the bill prices its share, a table's
    #: cells must validate (it decides on validation scores), the live view expects its share.
    stops_early: ClassVar[bool] = False
    #: Keys the kind's dump states although it takes none of them: its ``spec.yaml`` and ``table.yaml`` were written
    #: so when one spec held every kind's keys, and a resume compares them as written.
    dumped_as_before: ClassVar[dict[str, Any]] = {}

    #: Another kind's keys kept with their (non-default) values (:meth:`foreign_key`), dumped as given.
    _kept: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __new__(cls, *args: Any, **data: Any) -> SchedulerSpec:
        if cls is SchedulerSpec:  # the union's name builds the kind its type names (an unpickled old spec too)
            return kind_named(data.get("type", "fifo")).model_validate(data)
        return super().__new__(cls)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        name = cls.model_fields["type"].default
        if isinstance(name, str) and cls.__module__ != __name__:
            if name in _KINDS and _KINDS[name].__qualname__ != cls.__qualname__:
                raise RuntimeError(f"scheduler kind {name!r} is defined twice: {_KINDS[name]} and {cls}")
            _KINDS[name] = cls

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # While the base itself is created no kind exists yet: its own schema first, the union once they do.
        if not _KINDS or cls is not SchedulerSpec or source is not SchedulerSpec:
            return handler(source)
        kinds = scheduler_kinds()
        tagged = tuple(Annotated[kind, Tag(name)] for name, kind in kinds.items())
        unknown = f"type must be one of {', '.join(kinds)}"
        discriminator = Discriminator(_kind_of, custom_error_type="scheduler_type", custom_error_message=unknown)
        return handler.generate_schema(Annotated[Union[tagged], discriminator])  # noqa: UP007

    # ------------------------------------------------------------------------------------------- other kinds' keys

    @model_validator(mode="wrap")
    @classmethod
    def _other_kinds_keys(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict) or cls is SchedulerSpec:
            return handler(data)
        own, owners = cls.model_fields, _key_owners()
        foreign = {k: v for k, v in data.items() if k not in own and k in owners}
        spec = handler({k: v for k, v in data.items() if k not in foreign})
        kept: dict[str, Any] = {}
        for key, value in foreign.items():
            owner = owners[key][0]
            checked = getattr(owner.model_validate({key: value}), key)  # its range, and its type (3 → 3.0)
            if checked != owner.model_fields[key].default:
                kept[key] = cls.foreign_key(key, checked, [o.model_fields["type"].default for o in owners[key]])
        spec._kept = kept
        if kept:
            keys = ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else k for k, v in kept.items())
            note_once(
                f"search.scheduler {spec.type} stops no trial: {keys} kept, unused, for --set "
                "search.scheduler.type=… (and the scheduler a bill suggests)"
            )
        return spec

    @classmethod
    def foreign_key(cls, key: str, value: Any, owners: list[str]) -> Any:
        """Another kind's ``key``, set to ``value`` (not its default), in a spec of this kind: refused (``ValueError``,
        one line), or the value to keep (FIFO's choice). ``owners``: the kinds that take it."""
        name = cls.model_fields["type"].default
        raise ValueError(f"scheduler.{key} applies to {' and '.join(owners)} only, not to {name!r}")

    @property
    def kept(self) -> dict[str, Any]:
        """Other kinds' keys this spec keeps, with their values (FIFO's, for ``--set search.scheduler.type=…``)."""
        return dict(self._kept)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        before = {} if info.exclude_defaults or info.exclude_unset else self.dumped_as_before
        merged = {**before, **self._kept, **data}
        order = ["type", *_key_owners()]
        return {k: merged[k] for k in sorted(merged, key=lambda k: order.index(k) if k in order else len(order))}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An instance pickled when one class held every kind's keys (Ray's pickled live view holds the plan) comes
        back as its kind, revalidated from its fields."""
        fields = dict(state.get("__dict__") or {})
        kind = kind_named(fields.get("type", "fifo"))
        if type(self) is not kind or set(fields) - set(kind.model_fields):
            defaults = {k: f.default for k, f in _all_fields().items()}
            given = {k: v for k, v in fields.items() if k in kind.model_fields or v != defaults.get(k)}
            state = kind.model_validate(given).__getstate__()
            object.__setattr__(self, "__class__", kind)
        super().__setstate__(state)

    # ------------------------------------------------------------------------------------------------ the rules

    def check(self, epochs: int, num_trials: int) -> None:
        """What the kind needs of a run besides its keys' own ranges, for a study and a table alike (``train.epochs``,
        ``search.num_trials``); ``ValueError`` with one line. FIFO needs nothing."""

    def check_table(self, epochs: int, num_trials: int, validated: bool) -> None:
        """A table's rules: :meth:`check`, and a kind that stops trials decides on a validation score, so the table
        must validate (``validated``: ``validation.kind`` is not ``none``)."""
        if self.stops_early and not validated:
            raise ValueError(
                f"search.scheduler {self.type} stops trials on their validation score; with validation.kind none "
                "it would decide on the test classes: set validation (holdout or kfold) or scheduler fifo"
            )
        self.check(epochs, num_trials)

    def share(self, epochs: int, trials: int) -> float:
        """The expected share of a cell's search model-epochs (``trials`` trials of ``epochs`` each, FIFO's) its
        trials train under this kind, in (0, 1]: 1 for FIFO."""
        return 1.0

    def full_trials(self, epochs: int, trials: int) -> int:
        """How many of a cell's ``trials`` train every epoch (the candidates of its finalist race): at most all."""
        return trials

    def lag(self, trials_per_cell: int) -> int | None:
        """The ordered sampler's lag this kind needs (a cell's trial i asked once its trials ≤ i − lag ended), or
        ``None``: the plan's own (from ``max_concurrent``)."""
        return None

    def checkpoint_epochs(self, epochs: int) -> frozenset[int]:
        """The epochs of ``1 … epochs`` a search trial must checkpoint for this kind (the last, where every trial
        checkpoints anyway): a kind that pauses trials needs the epochs it pauses them at."""
        return frozenset({epochs})

    def summary(self) -> str:
        """The kind's keys in a few words (``grace 3, η 3``), for tables of runs."""
        return "every trial to the end"

    def describe(self, epochs: int, trials: int) -> str:
        """The plan's words for what the kind does to a cell's search of ``trials`` trials of ``epochs`` epochs."""
        return f"{self.type}: {self.summary()} (the search = {self.share(epochs, trials):.0%} of its model-epochs)"

    def cheaper(self, epochs: int, trials: int) -> SchedulerSpec | None:
        """The kind a run refused by ``search.max_hours`` is pointed to, to price against FIFO: this one when it
        stops trials early; ``None`` when none would help."""
        return self if self.stops_early else None

    def inline(self) -> str:
        """The spec as one would write it in a spec's flow style: ``{type: halving, first_rung: 3}``."""
        keys = [f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in self._own().items()]
        return "{" + ", ".join([f"type: {self.type}", *keys]) + "}"

    def _own(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in type(self).model_fields if k != "type"}


def _all_fields() -> dict[str, FieldInfo]:
    """Every kind's fields by key (the first kind's where two take one)."""
    return {k: kinds[0].model_fields[k] for k, kinds in _key_owners().items()}
