"""study.console: the libraries' loggers write to the study's log while a study runs, and are given back after.

The end-to-end check (a real study's stderr without Ray's, MLflow's and Optuna's start-up lines, its study.log with
them) is in tests/study/test_run.py.
"""

from __future__ import annotations

import logging
import re

from study.console import LIBRARY_LOGGERS, library_log


def test_lines_wait_for_the_study_dir_then_go_to_its_log_and_the_loggers_are_restored(tmp_path, capsys):
    import optuna  # noqa: F401 - both install their terminal handlers on import; the block swaps and restores them
    import ray  # noqa: F401

    before = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level) for name in LIBRARY_LOGGERS}
    log_file = tmp_path / "study.log"
    with library_log() as log:
        logging.getLogger("optuna.storages").info("A new study created in RDB with name: s")
        logging.getLogger("ray.tune").warning("connecting to postgresql://u:hunter2@db/x")
        assert not log_file.exists()  # the study's directory may not exist yet: nothing is written
        log.attach(str(log_file))
        logging.getLogger("mlflow.store.db.utils").info("Creating initial MLflow database tables...")
        logging.getLogger("alembic.runtime.migration").info("Running upgrade a -> b")  # below alembic's WARNING
        logging.getLogger("mlflow.tracking").error("the store broke\nsecond line")
    captured = capsys.readouterr()
    text = log_file.read_text()
    assert [re.sub(r"^\d{4}-\S+ \S+ [A-Z]+ ", "", line) for line in text.splitlines()] == [
        "optuna.storages: A new study created in RDB with name: s",
        "ray.tune: connecting to postgresql://u:***@db/x",
        "mlflow.store.db.utils: Creating initial MLflow database tables...",
        "mlflow.tracking: the store broke",
        "second line",
    ]
    assert "hunter2" not in text and captured.out == ""
    # An ERROR keeps one line of ours on the terminal; nothing else reaches it.
    assert captured.err == f"mlflow: the store broke (details in {log_file})\n"
    after = {name: (logging.getLogger(name).handlers, logging.getLogger(name).level) for name in LIBRARY_LOGGERS}
    assert after == before
    with library_log() as log:  # a resumed study appends to its log
        log.attach(str(log_file))
        logging.getLogger("optuna").warning("again")
    assert log_file.read_text().startswith(text) and log_file.read_text().endswith("optuna: again\n")


def test_a_log_that_cannot_be_written_is_dropped_without_a_word(tmp_path, capsys):
    import optuna  # noqa: F401
    import ray  # noqa: F401

    with library_log() as log:
        logging.getLogger("optuna").warning("before")
        log.attach(str(tmp_path / "gone" / "study.log"))  # a lost directory (a full disk fails the same way)
        logging.getLogger("optuna").warning("after")
    assert capsys.readouterr() == ("", "") and not (tmp_path / "gone").exists()
