"""The GPU path's decisions and their CPU fallbacks (this machine has no GPU), and gallery retrieval."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch

from harness.fake_data import write_cub, write_inshop
from study.intake.spec_reader import parse_spec
from trainables.loop import TrialRun
from trainables.loop.device import autocast_dtype, channels_last, pick_device
from trainables.metrics import neighbours, retrieval


def _spec(gpu: float = 0.0, amp: bool = True):
    return parse_spec({"name": "g", "family": "ms", "resources": {"cpu": 1, "gpu": gpu}, "train": {"amp": amp}})


def test_device_is_cuda_only_with_an_assigned_visible_gpu(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(_spec(gpu=1)).type == "cpu"  # a GPU trial on a machine without one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device(_spec(gpu=0)).type == "cpu"  # a CPU trial never grabs a visible GPU
    assert pick_device(_spec(gpu=0.5)) == torch.device("cuda", 0)  # Ray's CUDA_VISIBLE_DEVICES → cuda:0
    assert torch.backends.cudnn.benchmark


def test_bf16_autocast_only_on_a_cuda_device_that_supports_it(monkeypatch):
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert autocast_dtype(cuda, amp=True) is torch.bfloat16
    assert autocast_dtype(cuda, amp=False) is None
    assert autocast_dtype(cpu, amp=True) is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert autocast_dtype(cuda, amp=True) is None  # e.g. V100: no bf16, stay float32
    assert channels_last(cuda, (3, 224, 224)) and not channels_last(cpu, (3, 224, 224))


def test_faiss_gpu_only_when_faiss_sees_a_gpu(monkeypatch):
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    assert not neighbours.use_faiss_gpu()
    monkeypatch.delattr(faiss, "StandardGpuResources")  # faiss-cpu: no GPU classes at all
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    assert not neighbours.use_faiss_gpu()


def test_the_gpu_index_branch_moves_the_index_and_searches_in_chunks(monkeypatch):
    """Run the GPU branch with faiss's GPU calls replaced by CPU stand-ins that record what they got."""
    moved = []
    monkeypatch.setattr(neighbours, "use_faiss_gpu", lambda: True)
    monkeypatch.setattr(neighbours, "_gpu_resources", lambda: "resources")
    monkeypatch.setattr(
        faiss, "index_cpu_to_gpu", lambda res, dev, index: moved.append((res, dev)) or index, raising=False
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(53, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    got = neighbours.knn_indices(x, 3, chunk=10)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    np.testing.assert_array_equal(got, np.argsort(-sims, axis=1, kind="stable")[:, :3])
    assert moved == [("resources", 0)]


def test_queries_against_a_gallery_match_a_numpy_reference():
    rng = np.random.default_rng(1)
    q, g = rng.normal(size=(37, 6)).astype(np.float32), rng.normal(size=(41, 6)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    ql, gl = rng.integers(0, 5, 37), rng.integers(0, 5, 41)
    got = retrieval.recall_at_k(q, ql, (1, 2, 4), gallery=(g, gl))
    order = np.argsort(-(q @ g.T), axis=1)
    for k in (1, 2, 4):
        expected = np.mean([(gl[order[i, :k]] == ql[i]).any() for i in range(37)])
        assert got[f"recall_at_{k}"] == pytest.approx(expected)
    np.testing.assert_array_equal(neighbours.knn_indices(q, 4, chunk=5, gallery=g), order[:, :4])


def _image_spec(name: str, root, backbone: str = "resnet18", **train):
    return parse_spec(
        {
            "name": "img",
            "family": "ms",
            "dataset": {"name": name, "root": str(root), "image_size": 32, "resize_size": 36},
            "model": {"backbone": backbone, "embedding_dim": 16},
            "train": {
                "epochs": 1,
                "classes_per_batch": 2,
                "samples_per_class": 2,
                "eval_batch_size": 7,
                "recall_at": [1, 2, 4],
                **train,
            },
        }
    )


def test_resnet_epoch_on_fake_cub_falls_back_to_cpu_float32(tmp_path):
    root, _ = write_cub(tmp_path, n_classes=4, per_class=4)
    trial = TrialRun.single(_image_spec("cub200", root, amp=True))
    member = trial.member
    assert member.device.type == "cpu"
    assert member.model.backbone.conv1.weight.is_contiguous()  # no channels-last on the CPU
    m = trial.run_epoch()
    assert np.isfinite(m["train/loss"]) and 0 <= m["test/recall_at_1"] <= 1
    emb = member.embed(member.data.test)
    assert emb.dtype == torch.float32 and emb.shape == (8, 16)
    assert member._eval_loader(member.data.test) is member._eval_loader(member.data.test)  # built once


def test_inshop_trial_retrieves_queries_against_the_gallery(tmp_path):
    write_inshop(tmp_path, n_train=3, n_test=3, per_item=4)
    trial = TrialRun.single(_image_spec("inshop", tmp_path, backbone="small_cnn"))
    got = trial.run_epoch()
    member = trial.member  # its embeddings after the epoch: the independent recall below is computed on them
    test, gallery = member.data.test, member.data.gallery
    assert gallery is not None
    q, g = member.embed(test).numpy(), member.embed(gallery).numpy()
    expected = retrieval.recall_at_k(q, test.labels, (1, 2, 4), gallery=(g, gallery.labels))
    assert got["test/recall_at_1"] == pytest.approx(expected["recall_at_1"])
    assert got["test/recall_at_4"] == pytest.approx(expected["recall_at_4"])
