"""Runtime infrastructure of the driver: the Ray connection, the study lock, the watchdog, storage URIs, store failures and the private Ray/Optuna internals."""
