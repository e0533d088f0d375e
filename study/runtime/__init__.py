"""Runtime infrastructure of the driver, one concern per module:

- :mod:`study.runtime.cluster`: the Ray connection (a private local instance, or a cluster's address);
- :mod:`study.runtime.lock`: the study lock (one driver per study) and what ``--status`` says of the driver;
- :mod:`study.runtime.watchdog`: resources no node has, and the study's own Ray dying under it;
- :mod:`study.runtime.stopping`, :mod:`study.runtime.stop_callback`: stop signals, the drain, exit 3;
- :mod:`study.runtime.storage`, :mod:`study.runtime.store_errors`: storage URIs (local or an object store) and the
  one line a full or read-only store gives;
- :mod:`study.runtime.driver_run`, :mod:`study.runtime.slurm_queue`: what a run achieved, what Slurm says of its
  job;
- :mod:`study.runtime.compat`: the private Ray Tune, Optuna and Python internals the search relies on;
  :mod:`study.runtime.ray_node`: the private Ray internals of the node under it (GCS, loopback, sessions).

A map, not a face: callers import the module that holds a name (``from study.runtime.stopping import install``);
the wing's ``__init__`` imports nothing, so importing one light module of the wing never imports its heavy ones.
"""
