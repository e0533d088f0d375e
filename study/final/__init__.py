"""The final stage's statistics: the one best rule, the final stage's summary, the one confidence interval."""
