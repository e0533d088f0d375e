"""How a study selects and tests: the validation protocol, the finalist race and the final stage (re-exported by
:mod:`trainables.schema.spec`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from trainables.schema._strict import Seed, _Strict


class ValidationSpec(_Strict):
    """Where the searcher's metric comes from (the protocol of "A Metric Learning Reality Check", ECCV 2020).

    ``kfold``: the training classes are split into ``folds`` class-disjoint groups; a trial trains one model per
    fold on the other groups (in lockstep, one report per epoch) and reports ``val/<metric>``, the mean over the
    folds. ``holdout``: one group of ``fraction`` of the training classes is held out; one model per trial.
    ``none``: today's behaviour, the trials report ``test/<metric>`` and hyperparameters are selected on the
    test classes (the CLI warns). ``labels: noisy`` scores the validation samples with their observed labels
    (what a practitioner has; the noise is injected before the split, so every fold carries the study's
    rate); ``clean`` scores the same samples with their true labels (an oracle arm).
    """

    kind: Literal["kfold", "holdout", "none"] = "kfold"
    folds: int = Field(4, ge=2)
    fraction: float = Field(0.25, gt=0, lt=1)
    labels: Literal["noisy", "clean"] = "noisy"
    #: Seed of the class shuffle that forms the folds (the same for every trial of a study).
    seed: Seed = 0

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


class RaceSpec(_Strict):
    """``final.race``: after the search, each cell's ``finalists`` best trials (by ``search.objective``,
    among those that trained every epoch) are retrained on ``seeds`` more seeds each, on the cell's validation classes
    only; the final stage then retrains the finalist with the best mean over its search run and its race runs. Every
    arm gets the same ``finalists`` and ``seeds``, so a table stays fair. Costs ``finalists × seeds`` search trials per
    cell (the bill prices them)."""

    finalists: int = Field(3, ge=2)
    seeds: int = Field(2, ge=1)


class FinalSpec(_Strict):
    """The final test stage, run after the search by the same command: the best configuration by the search
    metric is retrained on all training classes with ``seeds`` seeds (0, 1, ...) and evaluated on the test classes;
    the parent run gets mean, std and a 95 % t-interval. ``group_by`` names search-space entries that are
    *conditions* rather than hyperparameters (e.g. ``family``, ``dataset.noise.ratio``): the best configuration
    is then chosen, and retrained, once per combination of their values. ``seeds: 0`` skips the stage.

    ``reseed_noise``: final seed *s* also draws the label noise with seed *s* (``dataset.noise.seed``), so the
    interval covers the noise draw as well as the model's initialisation: the estimate a noise-rate comparison
    wants. Off (the default), every final seed trains on the one noisy label set the search used, as with a
    published noisy-label list.
    """

    seeds: int = Field(5, ge=0)
    group_by: tuple[str, ...] = ()
    reseed_noise: bool = False
    #: The finalist race before the final stage: off by default.
    race: RaceSpec | None = None
    #: The first final seed: the stage retrains with seeds ``seed_offset`` … ``seed_offset + seeds - 1`` (0: seeds
    #: 0 … ``seeds``-1). Another offset draws other final seeds (a benchmark rerunning a whole table under another
    #: master seed); every group gets the same seeds, so the arms stay paired.
    seed_offset: int = Field(0, ge=0)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Dumped only when set: a study's spec.yaml and its Ray experiment's param space, written before the race
        # (and the seed offset) existed, stay what this version writes (a resume compares the one, Ray's
        # Tuner.restore the keys of the other).
        return drop_unset_race(handler(self))


def drop_unset_race(data: dict[str, Any]) -> dict[str, Any]:
    """A dumped ``final`` section without ``race: null`` nor ``seed_offset: 0`` (a study's or a table's: each dumped
    only when set)."""
    if data.get("race", 0) is None:
        data.pop("race")
    if data.get("seed_offset", 1) == 0:
        data.pop("seed_offset")
    return data


def check_race(race: RaceSpec | None, final_seeds: int, num_trials: int, validated: bool) -> None:
    """What ``final.race`` needs beyond its own ranges, for a study and a table alike: :class:`ValueError`, one line."""
    if race is None:
        return
    if not validated:
        raise ValueError(
            "final.race retrains finalists on validation classes; it needs validation.kind kfold or holdout"
        )
    if final_seeds < 1:
        raise ValueError("final.race picks the configuration the final stage retrains; it needs final.seeds >= 1")
    if race.finalists > num_trials:
        raise ValueError(
            f"final.race.finalists {race.finalists} exceeds search.num_trials {num_trials}: a cell has no more candidates"
        )
