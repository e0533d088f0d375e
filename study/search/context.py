"""The bundles the driver's core passes around: how a study is run (:class:`RunOptions`, the command line's run
options, declared once), and the study as this driver runs it (:class:`StudyContext`: the spec, where its files live,
the options, whether the search resumes, and its plan: :class:`~study.intake.plan.StudyPlan`, a study's one cell or a
table's cells). Nothing here imports Ray or the stores: the command line builds a :class:`RunOptions` before it
decides what to run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from study.intake.layout import StudyLayout
    from study.intake.plan import StudyPlan
    from trainables.schema.spec import StudySpec

__all__ = ["RunOptions", "StudyContext"]


@dataclass(frozen=True)
class RunOptions:
    """How to run a study, not what it is (``python -m study.run``'s options; a study and a table take the same).

    Args:
        resume: continue the existing study of this name (``Tuner.restore``).
        address: Ray cluster to connect to (default ``$RAY_ADDRESS``, else a private local instance).
        max_failures: restarts of a trial from its last checkpoint after an error (a lost node, say; -1: always).
        shared_storage: vouch that a local-looking ``storage`` path is shared by every node.
        pending_timeout_s: fail the study (:class:`~trainables.schema.errors.StudyStalledError`) when trials have
            waited this long for resources with none running (0: wait forever).
        drain_timeout_s: on a stop signal (:mod:`study.runtime.stopping`), how long running trials may take to
            reach their next checkpoint before the stage ends anyway.
        stores_checked: the caller tried the stores already (:func:`study.tracking.preflight.preflight_stores`: the
            command line does, before it imports torch and Ray); else the driver does.
    """

    resume: bool = False
    address: str | None = None
    max_failures: int = 0
    shared_storage: bool = False
    pending_timeout_s: float = 600.0
    drain_timeout_s: float = 60.0
    stores_checked: bool = False


@dataclass(frozen=True)
class StudyContext:
    """The study as this driver runs it, once its inputs are checked and its lock is held: made by
    :func:`study.search.driver.run_study`, read by the stages and their Tuners (:mod:`study.search.tuners`)."""

    spec: StudySpec
    layout: StudyLayout
    options: RunOptions
    #: Ray's search experiment is restored (:func:`study.search.resume.check_resume`), not started.
    resuming: bool
    #: What the search searches: the cells, their budget, how trials group (a study: one cell).
    plan: StudyPlan
