"""The final stage's statistics: which configuration is best, what its retraining over seeds gives, how sure that is.

- :mod:`study.final.best`: the one "best configuration" rule (ties to the earliest trial);
- :mod:`study.final.stage`: the final test stage's points, groups and summary files;
- :mod:`study.final.intervals`: the one 95 % confidence interval of a mean over seeds.

The driver (:mod:`study.search.driver`), ``--status`` and the dashboards read them; none imports Ray at module level.
"""

from __future__ import annotations

from study.runtime.face import face_of

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "CONFIDENCE": "study.final.intervals",
    "FinalGroup": "study.final.stage",
    "best_by_group": "study.final.best",
    "best_per_group": "study.final.stage",
    "best_result": "study.final.stage",
    "best_per_cell": "study.final.stage",
    "category_csv": "study.final.stage",
    "creation_order": "study.final.stage",
    "final_points": "study.final.stage",
    "few_seeds_warning": "study.final.intervals",
    "is_finite_number": "study.final.best",
    "pick_best": "study.final.best",
    "result_trial_id": "study.final.stage",
    "results_of": "study.final.stage",
    "summarize_final": "study.final.stage",
    "summary_csv": "study.final.stage",
    "t_interval": "study.final.intervals",
}
__getattr__, __dir__ = face_of(__name__, FACE)
__all__ = sorted(FACE)
