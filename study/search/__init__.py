"""The search engine: Ray Tune drives Optuna's sampler, one study from its checks to its final stage.

After Ray Tune's ``search/`` and ``schedulers/``, one role per module:

- :mod:`study.search.driver`: ``run_study``, a plan run (or resumed) to completion;
- :mod:`study.search.outcome`: ``StudyOutcome``, what a run produced (and where a stage that did not finish stands);
- :mod:`study.search.stages`: the stages of a run, each one kind over one base, each in a Tuner of its own;
- :mod:`study.search.trial_record`: what is recorded of each trial (MLflow params and tags, the stage's writer);
- :mod:`study.search.resume`: a new study or a resumed one, decided before anything is written;
- :mod:`study.search.context`: ``RunOptions`` (how to run a study) and ``StudyContext`` (the study as it runs);
- :mod:`study.search.tuners`: the Ray Tune ``Tuner`` of each stage, wired once;
- :mod:`study.search.space`: the validated search space as an Optuna define-by-run function and sampler;
- :mod:`study.search.ordered_sampler`: trial *i* sampled from a history fixed by *i* (``search.reproducible``);
- :mod:`study.search.study_search`: ``StudySearch``, the Ray searcher whose Optuna trials end as Ray decided;
- :mod:`study.search.scheduler_state`: the schedulers' rungs in the study directory, versioned JSON
  (``scheduler_state.json``), read back by a restored driver;
- :mod:`study.search.persistent_asha`: ``PersistentASHA``, kept only because older studies' Ray pickles name it;
- :mod:`study.search.environment`: what decides the numbers besides the spec, tagged on the parent run.
- :mod:`study.search.old_names`: the modules an older study's pickles name, resolved where their contents live now.

What the final stage computes from the results is :mod:`study.final`; the stores are :mod:`study.tracking`.

A map, not a face: callers import the module that holds a name (``from study.search.driver import run_study``);
the wing's ``__init__`` imports nothing, so importing one light module of the wing never imports its heavy ones.
"""
