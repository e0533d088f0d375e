"""The final stage's statistics: which configuration is best, what its retraining over seeds gives, how sure that is.

- :mod:`study.final.best`: the one "best configuration" rule (ties to the earliest trial);
- :mod:`study.final.stage`: the final test stage's points, groups and summary files;
- :mod:`study.final.race`: the finalist race (``final.race``): its points and standings;
- :mod:`study.final.reliability`: how reliable a cell's choice is on its validation classes;
- :mod:`study.final.intervals`: the one 95 % confidence interval of a mean over seeds.

The driver (:mod:`study.search.driver`), ``--status`` and the dashboards read them; none imports Ray at module level.

A map, not a face: callers import the module that holds a name (``from study.search.driver import run_study``);
the wing's ``__init__`` imports nothing, so importing one light module of the wing never imports its heavy ones.
"""
