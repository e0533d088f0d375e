"""The search engine: Ray Tune drives Optuna's sampler, one study from its checks to its final stage.

After Ray Tune's ``search/`` and ``schedulers/``, one role per module:

- :mod:`study.search.driver`: ``run_study``, a study run (or resumed) to completion;
- :mod:`study.search.resume`: a new study or a resumed one, decided before anything is written;
- :mod:`study.search.context`: ``RunOptions`` (how to run a study) and ``StudyContext`` (the study as it runs);
- :mod:`study.search.tuners`: the Ray Tune ``Tuner`` of each stage, wired once;
- :mod:`study.search.space`: the validated search space as an Optuna define-by-run function and sampler;
- :mod:`study.search.ordered_sampler`: trial *i* sampled from a history fixed by *i* (``search.reproducible``);
- :mod:`study.search.study_search`: ``StudySearch``, the Ray searcher whose Optuna trials end as Ray decided;
- :mod:`study.search.persistent_asha`: ``PersistentASHA``, ASHA whose rungs survive a driver restart;
- :mod:`study.search.environment`: what decides the numbers besides the spec, tagged on the parent run.
- :mod:`study.search.old_names`: the modules an older study's pickles name, resolved where their contents live now.

What the final stage computes from the results is :mod:`study.final`; the stores are :mod:`study.tracking`.
"""

from __future__ import annotations

from study.runtime.face import face_of

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "CellASHA": "study.search.cell_asha",
    "CellBudget": "study.search.cell_search",
    "CellSearch": "study.search.cell_search",
    "ConditionalGridSampler": "study.search.space",
    "DefineByRun": "study.search.space",
    "HalvingRule": "study.search.halving",
    "HalvingScheduler": "study.search.halving",
    "MOVED": "study.search.old_names",
    "OPERATIONAL_KEYS": "study.search.resume",
    "OrderedSampler": "study.search.ordered_sampler",
    "PersistentASHA": "study.search.persistent_asha",
    "RunOptions": "study.search.context",
    "Rungs": "study.search.cell_asha",
    "StageProgress": "study.search.driver",
    "StudyContext": "study.search.context",
    "StudyOutcome": "study.search.driver",
    "StudySearch": "study.search.study_search",
    "accept_old_names": "study.search.old_names",
    "browse_commands": "study.search.driver",
    "cell_label_of": "study.search.cell_asha",
    "cell_scheduler": "study.search.tuners",
    "cell_searcher": "study.search.tuners",
    "check_resume": "study.search.resume",
    "cpu_flags": "study.search.environment",
    "cpu_model": "study.search.environment",
    "describe_trial": "study.search.driver",
    "final_tuner": "study.search.tuners",
    "halving_rungs": "study.search.halving",
    "kept_at_rung": "study.search.halving",
    "kept_count": "study.search.halving",
    "make_sampler": "study.search.space",
    "may_ask": "study.search.ordered_sampler",
    "numerics_tags": "study.search.environment",
    "read_state_once": "study.search.persistent_asha",
    "run_study": "study.search.driver",
    "rung_values": "study.search.cell_asha",
    "search_tuner": "study.search.tuners",
    "stage_ledger": "study.search.tuners",
    "stage_tuner": "study.search.tuners",
    "study_searcher": "study.search.tuners",
    "to_optuna": "study.search.space",
    "trials_seen_by": "study.search.ordered_sampler",
}
__getattr__, __dir__ = face_of(__name__, FACE)
__all__ = sorted(FACE)
