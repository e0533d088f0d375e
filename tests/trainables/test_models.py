"""Backbones, embedding head, frozen BatchNorm and offline ImageNet weights."""

from __future__ import annotations

import pytest
import torch
import torchvision

from study.intake.spec_reader import parse_spec
from trainables.models import build_model, check_pretrained
from trainables.schema.errors import DataError, SpecError
from trainables.schema.spec import ModelSpec


def _spec(**kw) -> ModelSpec:
    return ModelSpec(**{"embedding_dim": 16, **kw})


@pytest.mark.parametrize("backbone", ["resnet18", "resnet34", "resnet50", "googlenet"])
def test_torchvision_backbones_give_normalised_embeddings(backbone):
    torch.manual_seed(0)
    model = build_model(_spec(backbone=backbone), (3, 64, 64)).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 64, 64))
    assert out.shape == (2, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(2))
    assert isinstance(model.backbone.fc, torch.nn.Identity)


def test_rgb_backbone_refuses_grey_digits():
    with pytest.raises(ValueError, match="needs RGB images"):
        build_model(_spec(backbone="resnet18"), (1, 8, 8))


def test_frozen_batchnorm_keeps_statistics_and_affine_parameters():
    torch.manual_seed(0)
    model = build_model(_spec(backbone="resnet18", frozen_bn=True), (3, 32, 32))
    model.train()
    bn = model.backbone.bn1
    assert not bn.training and model.backbone.conv1.training and model.training
    assert not any(p.requires_grad for p in bn.parameters())
    assert model.head.weight.requires_grad and model.backbone.conv1.weight.requires_grad
    before = bn.running_mean.clone()
    model(torch.randn(4, 3, 32, 32) * 5 + 3).sum().backward()
    torch.testing.assert_close(bn.running_mean, before)
    assert bn.weight.grad is None and model.backbone.conv1.weight.grad is not None
    # Without freezing, the same step moves the running statistics.
    free = build_model(_spec(backbone="resnet18"), (3, 32, 32)).train()
    free(torch.randn(4, 3, 32, 32) * 5 + 3)
    assert not torch.allclose(free.backbone.bn1.running_mean, before)


def _fake_imagenet_file(directory, backbone: str, filename: str | None = None):
    """A torchvision state dict (random values) stored where torchvision would cache the real one."""
    torch.manual_seed(1)
    kwargs = {"aux_logits": True, "init_weights": True} if backbone == "googlenet" else {}
    reference = getattr(torchvision.models, backbone)(weights=None, **kwargs)
    weights = getattr(torchvision.models, {"resnet18": "ResNet18_Weights", "googlenet": "GoogLeNet_Weights"}[backbone])
    path = directory / (filename or weights.IMAGENET1K_V1.url.rsplit("/", 1)[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(reference.state_dict(), path)
    return path, reference


@pytest.mark.parametrize("backbone", ["resnet18", "googlenet"])
def test_pretrained_weights_load_from_the_torch_cache_only(tmp_path, monkeypatch, backbone):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    spec = _spec(backbone=backbone, pretrained=True)
    with pytest.raises(DataError) as err:
        check_pretrained(spec)
    msg = str(err.value)
    assert "\n" not in msg and "not available offline" in msg
    assert f"python -m study.data weights {backbone}" in msg and "model.weights" in msg
    path, reference = _fake_imagenet_file(tmp_path / "torch" / "hub" / "checkpoints", backbone)
    check_pretrained(spec)
    model = build_model(spec, (3, 64, 64))
    torch.testing.assert_close(
        model.backbone.conv1.weight if backbone == "resnet18" else model.backbone.conv1.conv.weight,
        reference.conv1.weight if backbone == "resnet18" else reference.conv1.conv.weight,
    )
    if backbone == "googlenet":
        assert model.backbone.transform_input and model.backbone.aux1 is None


def test_pretrained_weights_from_a_file_in_the_spec(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    path, reference = _fake_imagenet_file(tmp_path, "resnet18", "my_resnet18.pth")
    spec = _spec(backbone="resnet18", pretrained=True, weights=str(path))
    model = build_model(spec, (3, 32, 32))
    torch.testing.assert_close(model.backbone.layer4[1].bn2.running_var, reference.layer4[1].bn2.running_var)
    with pytest.raises(DataError, match="model.weights: no such file"):
        check_pretrained(_spec(backbone="resnet18", pretrained=True, weights=str(tmp_path / "nope.pth")))
    with pytest.raises(DataError, match="is not a resnet50 state dict"):
        build_model(_spec(backbone="resnet50", pretrained=True, weights=str(path)), (3, 32, 32))


def test_pretrained_keys_are_checked_when_the_spec_loads():
    base = {"name": "s", "family": "ms"}
    with pytest.raises(SpecError, match="backbone 'small_cnn' has no ImageNet weights"):
        parse_spec({**base, "model": {"backbone": "small_cnn", "pretrained": True}})
    with pytest.raises(SpecError, match="model.weights is set but model.pretrained is false"):
        parse_spec({**base, "model": {"backbone": "resnet18", "weights": "w.pth"}})
    with pytest.raises(SpecError, match="unknown backbone 'bninception'"):
        parse_spec({**base, "model": {"backbone": "bninception"}})


def test_small_cnn_gets_small_crops_on_image_datasets_unless_the_spec_sizes_them(tmp_path):
    from harness.fake_data import write_imagefolder
    from trainables.data import load_dataset
    from trainables.models import SMALL_CNN_IMAGE_SIZE, input_dataset

    root, _ = write_imagefolder(tmp_path)
    base = {"name": "s", "family": "ms", "dataset": {"name": "imagefolder", "root": str(root)}}
    spec = parse_spec(base)
    data = load_dataset(input_dataset(spec), 0)
    assert data.input_shape == (3, SMALL_CNN_IMAGE_SIZE, SMALL_CNN_IMAGE_SIZE)
    image = data.train.load_item(data.train.items[0])
    assert data.train_transform(image).shape == (3, 32, 32) and data.eval_transform(image).shape == (3, 32, 32)
    sized = parse_spec({**base, "dataset": {**base["dataset"], "image_size": 64}})
    assert load_dataset(input_dataset(sized), 0).input_shape == (3, 64, 64)  # the spec's own size wins
    resnet = parse_spec({**base, "model": {"backbone": "resnet18"}})
    assert input_dataset(resnet).image_size is None  # other backbones keep the benchmarks' 224-px crops
