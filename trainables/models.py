"""Embedding networks: a backbone, a linear embedding head, L2-normalised output.

Backbones: ``small_cnn`` (for the 8×8 digits on a CPU), ``paired_mlp`` (two 2-layer MLP encoders routed by
modality, for the paired 2-D ``flows2d`` data) and torchvision's ResNet-18/34/50 and GoogLeNet (the
Inception stand-in of the DML benchmarks; BN-Inception has no maintained package: ``pretrainedmodels`` was
last released in 2018). ImageNet weights are read only from a file (``model.weights``) or the local torch hub
cache, never downloaded here: the driver fetches them first (``study.data``, unless ``model.download: false``) and
:func:`check_pretrained` runs on the driver before Ray starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from trainables.backbones import BACKBONE_NAMES, PRETRAINABLE
from trainables.schema.errors import DataError

if TYPE_CHECKING:
    from trainables.schema.spec import DatasetSpec, ModelSpec, StudySpec

__all__ = [
    "BACKBONE_NAMES",
    "PRETRAINABLE",
    "TORCHVISION_WEIGHTS",
    "EmbeddingNet",
    "SmallConvNet",
    "PairedMLP",
    "build_model",
    "check_pretrained",
    "pretrained_weights_file",
]


class SmallConvNet(nn.Module):
    """Three conv blocks and global average pooling; for the 8×8 digits on a CPU."""

    out_features = 128

    def __init__(self, in_channels: int = 1) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *block(in_channels, 32),
            *block(32, 64),
            nn.MaxPool2d(2),
            *block(64, self.out_features),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


class PairedMLP(nn.Module):
    """Two encoders of two fully connected layers each (``Linear → ReLU → Linear``), one per modality of paired
    data (the debiased-contrastive thesis §4.1: "two different encoders of two fully connected layers").

    Each input row is ``[features..., modality]``; the last column routes the row to its encoder. The towers
    output the embedding themselves (no shared head: :func:`build_model` gives it an identity head).
    """

    outputs_embedding = True
    hidden = 64  # the thesis does not give the width

    def __init__(self, in_features: int, embedding_dim: int, num_modalities: int = 2) -> None:
        super().__init__()
        self.towers = nn.ModuleList(
            nn.Sequential(nn.Linear(in_features, self.hidden), nn.ReLU(), nn.Linear(self.hidden, embedding_dim))
            for _ in range(num_modalities)
        )
        self.embedding_dim = embedding_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        modality = x[:, -1].round().long()
        features = x[:, :-1]
        out = features.new_zeros(len(x), self.embedding_dim)
        for i, tower in enumerate(self.towers):
            rows = modality == i
            if rows.any():
                out = out.index_put((rows,), tower(features[rows]))
        return out


class EmbeddingNet(nn.Module):
    """``normalize(head(backbone(x)))``: cosine similarity is a dot product of its outputs.

    With ``frozen_bn`` every BatchNorm of the backbone stays in eval mode (running statistics from
    pre-training, not from a 64-image P×K batch of a few classes) and its affine parameters are not trained,
    as in the MS-loss setup (https://arxiv.org/abs/1904.06627 Sec. 5.1).

    With ``normalize=False`` the output is ``head(backbone(x))`` itself (for a family that declares
    ``raw_embeddings``). A backbone with ``outputs_embedding = True`` (``PairedMLP``) gets no linear head.
    """

    def __init__(
        self,
        backbone: nn.Module,
        feature_dim: int,
        embedding_dim: int,
        frozen_bn: bool = False,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = (
            nn.Identity() if getattr(backbone, "outputs_embedding", False) else nn.Linear(feature_dim, embedding_dim)
        )
        self.normalize = normalize
        self.frozen_bn = frozen_bn
        if frozen_bn:
            for bn in self._batchnorms():
                bn.requires_grad_(False)
            self.train(self.training)

    def _batchnorms(self) -> list[nn.Module]:
        return [m for m in self.backbone.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]

    def train(self, mode: bool = True) -> EmbeddingNet:
        super().train(mode)
        if self.frozen_bn:
            for bn in self._batchnorms():
                bn.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(self.backbone(x))
        return F.normalize(out, dim=-1) if self.normalize else out


#: ``small_cnn``'s input side on image datasets whose spec sets no ``dataset.image_size``: the benchmarks' 224-px
#: crop would make this three-layer CNN (sized for 8×8 digits) spend ~50× the compute per image for no use.
SMALL_CNN_IMAGE_SIZE = 32


def input_dataset(spec: StudySpec) -> DatasetSpec:
    """The dataset spec the model's input is loaded with: ``small_cnn`` gets :data:`SMALL_CNN_IMAGE_SIZE`-px
    crops (resized to 37 px first) unless the spec sizes the images itself; in-memory datasets ignore sizes."""
    d = spec.dataset
    if spec.model.backbone == "small_cnn" and d.image_size is None and d.resize_size is None:
        return d.model_copy(update={"image_size": SMALL_CNN_IMAGE_SIZE})
    return d


def _small_cnn(spec: ModelSpec, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    net = SmallConvNet(in_channels=input_shape[0])
    return net, net.out_features


# backbone → (torchvision constructor, weights enum, feature dimension before the classifier)
_TORCHVISION: dict[str, tuple[str, str, int]] = {
    "resnet18": ("resnet18", "ResNet18_Weights", 512),
    "resnet34": ("resnet34", "ResNet34_Weights", 512),
    "resnet50": ("resnet50", "ResNet50_Weights", 2048),
    "googlenet": ("googlenet", "GoogLeNet_Weights", 1024),
}
#: backbone → torchvision's weights enum (the driver's ``python -m study.data weights`` downloads through it).
TORCHVISION_WEIGHTS: dict[str, str] = {name: enum for name, (_, enum, _) in _TORCHVISION.items()}


def _weight_urls(backbone: str) -> list[str]:
    """Official weight URLs of ``backbone``, IMAGENET1K_V1 first (the weights the DML papers start from)."""
    import torchvision.models as tvm

    return [w.url for w in getattr(tvm, _TORCHVISION[backbone][1])]


def pretrained_weights_file(spec: ModelSpec) -> Path:
    """The file the ImageNet weights load from: ``spec.weights``, else torchvision's file in the hub cache."""
    if spec.weights is not None:
        path = Path(spec.weights)
        if not path.is_file():
            raise DataError(f"model.weights: no such file: {path} (a torchvision state dict of {spec.backbone})")
        return path
    cache = Path(torch.hub.get_dir()) / "checkpoints"
    urls = _weight_urls(spec.backbone)
    for url in urls:
        if (cache / os.path.basename(url)).is_file():
            return cache / os.path.basename(url)
    raise DataError(
        f"model.pretrained: ImageNet weights of {spec.backbone} are not available offline ({os.path.basename(urls[0])} "
        f"is not in {cache}); run python -m study.data weights {spec.backbone} (on a machine with internet; "
        f"or download {urls[0]}) and copy the file into "
        f"{cache} on every node, or set model.weights: /path/to/{os.path.basename(urls[0])}"
    )


def check_pretrained(spec: ModelSpec) -> None:
    """Driver-side check that ``model.pretrained`` weights can be loaded offline (raises ``DataError``)."""
    if spec.pretrained:
        pretrained_weights_file(spec)


def _load_imagenet_weights(net: nn.Module, spec: ModelSpec) -> None:
    path = pretrained_weights_file(spec)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    # The ImageNet classifier and GoogLeNet's auxiliary heads are not part of an embedding network.
    state = {k: v for k, v in state.items() if not k.startswith(("fc.", "aux1.", "aux2."))}
    try:
        missing, unexpected = net.load_state_dict(state, strict=False)
    except RuntimeError:  # shape mismatches: another architecture's weights
        missing, unexpected = ["(shapes differ)"], []
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        raise DataError(
            f"model.weights: {path} is not a {spec.backbone} state dict "
            f"(missing {missing[:3]}, unexpected {list(unexpected)[:3]})"
        )


def _torchvision(spec: ModelSpec, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    import torchvision.models as tvm

    if input_shape[0] != 3:
        raise ValueError(
            f"model.backbone {spec.backbone} needs RGB images, but the dataset gives {input_shape}; use small_cnn"
        )
    fn, _, feature_dim = _TORCHVISION[spec.backbone]
    kwargs: dict[str, bool] = {}
    if fn == "googlenet":
        # transform_input converts ImageNet-normalised input to the normalisation the ported weights expect.
        kwargs = {"aux_logits": False, "transform_input": spec.pretrained, "init_weights": not spec.pretrained}
    net = getattr(tvm, fn)(weights=None, **kwargs)
    if spec.pretrained:
        _load_imagenet_weights(net, spec)
    net.fc = nn.Identity()
    if fn == "googlenet":
        net.dropout = nn.Identity()  # dropout before the (removed) classifier would perturb the embedding
    return net, feature_dim


def _paired_mlp(spec: ModelSpec, input_shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    if len(input_shape) != 1 or input_shape[0] < 2:
        raise ValueError(
            f"model.backbone paired_mlp needs paired vector data ([features..., modality] rows, e.g. flows2d), "
            f"but the dataset gives {input_shape}"
        )
    return PairedMLP(input_shape[0] - 1, spec.embedding_dim), spec.embedding_dim


_BACKBONES = {"small_cnn": _small_cnn, "paired_mlp": _paired_mlp, **{name: _torchvision for name in _TORCHVISION}}


def build_model(spec: ModelSpec, input_shape: tuple[int, ...], normalize: bool = True) -> EmbeddingNet:
    """The embedding network of ``spec``; ``normalize=False`` for a family that declares ``raw_embeddings``."""
    backbone, feature_dim = _BACKBONES[spec.backbone](spec, input_shape)
    return EmbeddingNet(backbone, feature_dim, spec.embedding_dim, frozen_bn=spec.frozen_bn, normalize=normalize)
