"""The search engine: Ray Tune drives Optuna's sampler, one study from its checks to its final stage."""
