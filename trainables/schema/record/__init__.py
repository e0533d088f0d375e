"""The MLflow record of a study, defined once: run tags and their values, the parent run's params the dashboards
read, artifact file names and their columns, and the suffixes of the final stage's summary values.

The tracker (``study/tracking/callback.py``, ``study/search/driver.py``, ``study/final/stage.py``) writes the record and
``study/status.py`` and the dashboards read it; both sides name every tag, value and file through this module, so a
rename is one edit and a typo is an ``AttributeError`` rather than a silently empty column. Metric names are in
:mod:`trainables.schema.metric_names`.

Layout of one study's experiment:

- one *parent* run (``ROLE_TAG = ROLE_STUDY``) with the spec's params (``search.*``, ``validation.*``, ...), the
  :data:`PARENT_TAGS`, summary metrics (:data:`SUMMARY_SUFFIXES` with one final group) and :data:`FINAL_SUMMARY_FILE`;
- one *child* run per Ray trial (``ROLE_TAG = ROLE_TRIAL``, ``PARENT_TAG`` = the parent's run id) with the trial's
  flattened config as params, the :data:`TRIAL_TAGS`, per-epoch metrics and the trial's artifacts.
"""

from __future__ import annotations

from trainables.schema.record import _files, _runs, _selection
from trainables.schema.record._files import *  # noqa: F403 - the face re-exports every name
from trainables.schema.record._runs import *  # noqa: F403
from trainables.schema.record._selection import *  # noqa: F403

__all__ = [*_runs.__all__, *_files.__all__, *_selection.__all__]
