"""A driver a test starts gets no ``RAY_ADDRESS`` from the shell that runs the tests (its default is its own private
Ray), unless the test asked for the session's warm head (``on_warm_head`` in tests/conftest.py)."""

from __future__ import annotations

from harness.driver import SESSION_HEAD_ENV, driver_env, study_env


def test_a_shells_ray_address_is_dropped_unless_the_test_asked_for_the_session_head(monkeypatch):
    assert "RAY_ADDRESS" not in study_env({"RAY_ADDRESS": "10.0.0.1:6379", "PATH": "/bin"})
    assert study_env({"RAY_ADDRESS": "warm", SESSION_HEAD_ENV: "1"})["RAY_ADDRESS"] == "warm"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    monkeypatch.delenv(SESSION_HEAD_ENV, raising=False)
    assert "RAY_ADDRESS" not in driver_env("/tmp/ray")
    monkeypatch.setenv("RAY_ADDRESS", "warm")
    monkeypatch.setenv(SESSION_HEAD_ENV, "1")
    assert driver_env("/tmp/ray")["RAY_ADDRESS"] == "warm"
