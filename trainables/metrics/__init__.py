"""The evaluation metrics: what a trial reports, by name, and the functions that compute it.

- :mod:`~trainables.metrics.registry`: every evaluation metric's name, what it requires, and which function
  computes it (:func:`~trainables.metrics.registry.computes`). Torch- and faiss-free: the spec layer reads it to
  know what a trial reports.
- :mod:`~trainables.metrics.retrieval`: Recall@k, MAP@R, R-precision, NMI and spectral decay (faiss), and
  ``retrieval_metrics``, which the loop calls each evaluation.
- :mod:`~trainables.metrics.contrastive`: the paired metrics and the linear probe (torch).
- :mod:`~trainables.metrics.categories`: Recall@1 and MAP@R per category of the test queries.
- :mod:`~trainables.metrics.neighbours`: the kNN search the others share, what it searches in and R per query.

This face imports nothing, so that reading the registry does not import faiss or torch; import from the modules.
"""
