"""``python -m study.data weights`` and the driver's ``model.pretrained`` pre-flight, against a local HTTP server.

torchvision's weights URL is pointed at 127.0.0.1, serving a tiny state dict under a file name whose hash prefix is
(or, for the failure, is not) the first 8 hex digits of its SHA-256, which is what torch.hub checks.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket

import pytest
import torch
import torchvision.models as tvm

from harness.http_server import FileServer
from study.data import FetchError, ensure_pretrained
from study.data.__main__ import main
from trainables.schema.spec import ModelSpec


@pytest.fixture
def tiny_weights(tmp_path, monkeypatch):
    """(bytes, good name, cache dir): the torch cache is private to the test."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    buf = io.BytesIO()
    torch.save({"conv1.weight": torch.arange(12.0).reshape(1, 3, 2, 2)}, buf)
    data = buf.getvalue()
    return data, f"resnet18-{hashlib.sha256(data).hexdigest()[:8]}.pth", tmp_path / "torch" / "hub" / "checkpoints"


def _point_weights_at(monkeypatch, url: str) -> None:
    monkeypatch.setattr(tvm.ResNet18_Weights.IMAGENET1K_V1.value, "url", url)


def test_weights_land_in_the_cache_hash_checked_and_once(tiny_weights, monkeypatch, capsys):
    data, name, cache = tiny_weights
    with FileServer({f"/{name}": data}) as server:
        _point_weights_at(monkeypatch, server.url(f"/{name}"))
        assert main(["weights", "resnet18"]) == 0
        assert (cache / name).read_bytes() == data
        assert main(["weights", "resnet18"]) == 0
        assert len(server.requests) == 1  # the second call found it in the cache
    out = capsys.readouterr().out
    assert f"already in the cache: {cache / name}" in out
    assert torch.equal(torch.load(cache / name)["conv1.weight"], torch.arange(12.0).reshape(1, 3, 2, 2))


def test_a_file_whose_hash_does_not_match_its_name_is_not_saved(tiny_weights, monkeypatch, capsys):
    data, _, cache = tiny_weights
    with FileServer({"/resnet18-00000000.pth": data}) as server:
        _point_weights_at(monkeypatch, server.url("/resnet18-00000000.pth"))
        assert main(["weights", "resnet18"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid hash value" in err and "resnet18-00000000.pth" in err
    assert not cache.exists() or os.listdir(cache) == []


def test_the_driver_downloads_missing_weights_unless_forbidden_or_offline(tiny_weights, monkeypatch):
    data, name, cache = tiny_weights
    spec = ModelSpec(backbone="resnet18", pretrained=True, download=False)
    with FileServer({f"/{name}": data}) as server:
        _point_weights_at(monkeypatch, server.url(f"/{name}"))
        with pytest.raises(FetchError) as err:
            ensure_pretrained(spec)
        assert str(err.value) == (
            f"model.pretrained: {name} is not in {cache} and model.download is false; put it there "
            f"(from {server.url(f'/{name}')}) or run python -m study.data weights resnet18"
        )
        assert server.requests == []
        calls = []
        assert ensure_pretrained(spec.model_copy(update={"download": True}), lambda: calls.append(1)) == cache / name
        assert calls == [1]  # the study checks its data root just before a download
        assert (cache / name).read_bytes() == data
        assert ensure_pretrained(spec, lambda: calls.append(2)) == cache / name  # present: no download, no check
        assert calls == [1]
    assert ensure_pretrained(ModelSpec(backbone="resnet18")) is None  # not pretrained: nothing to do

    (cache / name).unlink()
    with socket.socket() as s:  # offline: a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/{name}"
    _point_weights_at(monkeypatch, url)
    with pytest.raises(FetchError, match=rf"^cannot download {name} from {url} \(.*refused.*\); .* put it in {cache}$"):
        ensure_pretrained(spec.model_copy(update={"download": True}))


def test_a_study_without_weights_and_download_false_stops_before_ray(
    tmp_path, monkeypatch, spec_dict, write_spec, run_cli
):
    from harness.fake_data import write_cub

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty_torch"))
    root, _ = write_cub(tmp_path)
    spec_dict["dataset"] = {"name": "cub200", "root": str(root), "image_size": 32}
    spec_dict["model"] = {"backbone": "resnet18", "pretrained": True, "download": False}
    spec_dict["train"] = {"epochs": 1, "classes_per_batch": 2, "samples_per_class": 2}
    r = run_cli(str(write_spec(spec_dict)))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "model.download is false" in r.stderr and str(tmp_path / "empty_torch" / "hub" / "checkpoints") in r.stderr
    assert not (tmp_path / "studies").exists() and not any(tmp_path.glob("mlruns*"))
