"""The driver's checks before ``ray.init`` (:mod:`study.runtime.cluster`); the token case against a real head is
``tests/study/runtime/test_ray_cli_cluster.py``."""

from __future__ import annotations

import os
import socket

import pytest

from study.runtime.cluster import connect_error, private_instance_token, probe_cluster
from trainables.schema.errors import StudyError


def test_an_address_nothing_listens_on_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(StudyError) as e:
            probe_cluster(f"127.0.0.1:{port}", timeout=5)
    assert str(e.value).startswith(f"cannot reach the Ray cluster at 127.0.0.1:{port} (Connection refused)")
    assert f"ray start --head --port {port}" in str(e.value)
    probe_cluster("auto")  # other forms are ray.init's to judge
    probe_cluster("ray://head:10001")


def test_ray_init_failures_are_named(monkeypatch):
    from ray.exceptions import AuthenticationError

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    try:
        try:
            raise AuthenticationError("RPC error: InvalidAuthToken")
        except AuthenticationError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at h:1") from inner
    except ConnectionError as e:
        line = connect_error(e, "h:1")
    assert line is not None and line.startswith("cannot authenticate to the Ray cluster at h:1")
    assert "(RAY_AUTH_MODE is unset)" in line and "RAY_AUTH_TOKEN=" in line
    assert (connect_error(ConnectionError("nothing there"), "h:1") or "").startswith("cannot reach")
    assert connect_error(ValueError("something else"), "h:1") is None


def test_the_private_instance_gets_a_token_only_when_none_is_configured(monkeypatch, tmp_path):
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    private_instance_token()
    token = os.environ["RAY_AUTH_TOKEN"]
    assert len(token) == 32 and not (tmp_path / ".ray").exists()
    private_instance_token()
    assert os.environ["RAY_AUTH_TOKEN"] == token  # a token that exists is kept
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("mine")
    private_instance_token()
    assert "RAY_AUTH_TOKEN" not in os.environ  # the user's file is used by Ray
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    (tmp_path / ".ray" / "auth_token").unlink()
    private_instance_token()
    assert "RAY_AUTH_TOKEN" not in os.environ
