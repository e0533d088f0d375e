"""Tracking: the MLflow callback and store, read-only peeks, credentials, and the local tracking server."""
