"""The debiased-contrastive thesis' 2-D experiment (§4.1, Table 1) as a paired two-modality dataset ``flows2d``.

``/work/shared/papers/unbiased-contrastive-learning-thesis-ru.txt`` §4.1: z ~ N(0, I) in 2-D; two Real NVP flows
(Dinh et al., ICLR 2017, https://arxiv.org/abs/1605.08803) map each z to two modalities, "moons" and "5 circles"
from scikit-learn; the pair (a, b) made from one z is one sample, its two views the two modalities.

- "moons": ``sklearn.datasets.make_moons`` (noise 0.05).
- "5 circles" (``5 кругов``): in Russian ``круг`` is a filled disc (a circle line is ``окружность``), and
  scikit-learn's ``make_circles`` always draws exactly two rings, so we read it as five round blobs,
  ``sklearn.datasets.make_blobs`` with five centres (on a regular pentagon of radius 2, std 0.3, so the discs
  do not touch). Documented in docs/notebook/thesis_2d.md.
- Both targets are standardised (zero mean, unit variance per coordinate) before the flows are fitted.

Flows: written here, not taken from ``zuko``/``normflows``: a 2-D Real NVP is six affine coupling layers of a
few lines each, and owning them keeps the dataset free of a new dependency and bitwise deterministic (trained
on one thread from a fixed seed). Each flow ``f`` is fitted by maximum likelihood on samples of its target
(``log N(f(x)) + log|det ∂f/∂x|``); a modality is ``f⁻¹(z)``. Trained flows are memoised per process (a Ray
worker that runs several trials trains them once) and, when ``dataset.root`` is set, cached there as a file
named by a hash of everything that determines them (:class:`FlowConfig`); nothing is written anywhere else.
Fitting both flows takes tens of seconds on one CPU thread (34.6 s measured on a loaded 2-core machine, see
docs/notebook/thesis_2d.md); loading them from the cache 0.06 s.

Samples: ``N_TRAIN`` = 1024 training z's and ``N_TEST`` = 1024 held-out ones (fixed seeds: every trial sees the
same data; the trial seed moves the encoders' initialisation and the batch order only). Labels (for the P×K
sampler and the retrieval metrics only; the contrastive losses never read them): the octant of z's angle, 8 classes
of equal probability under N(0, I), so an 8×4 batch is a stratified random batch of 32 (the thesis: batch 32).
Each view is ``[x, y, modality]``: the modality index routes it to its encoder (``paired_mlp``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from trainables.data._splits import DatasetSplits, LabeledSplit

if TYPE_CHECKING:
    from trainables.schema.spec import DatasetSpec

__all__ = [
    "load_flows2d_splits",
    "RealNVP",
    "trained_flows",
    "target_samples",
    "MODALITIES",
    "NUM_SECTORS",
    "NUM_TRAIN_CLASSES",
    "N_TRAIN",
    "N_TEST",
    "FirstView",
    "FlowConfig",
    "DEFAULT_FLOWS",
    "paired_split",
]

MODALITIES = ("moons", "blobs5")
NUM_SECTORS = 8
#: Training classes without loading (the driver's class-count checks would otherwise fit the flows).
NUM_TRAIN_CLASSES = NUM_SECTORS
N_TRAIN = 1024
N_TEST = 1024
_DATA_SEED = 0


@dataclass(frozen=True)
class FlowConfig:
    """Everything that determines the two trained flows (hashed into the cache file's name).

    Args:
        layers: affine coupling layers per flow (alternating the kept coordinate).
        hidden: width of the two hidden layers of each coupling's scale/shift network.
        steps: Adam steps of the maximum-likelihood fit (cosine-annealed learning rate).
        batch: target samples per step.
        lr: initial learning rate.
        samples: size of the fixed target sample the batches are drawn from.
        seed: seed of the target sample, the initialisation and the batch draws.
        moons_noise: ``make_moons`` noise.
        blobs_radius: radius of the pentagon the five blob centres sit on.
        blobs_std: ``make_blobs`` standard deviation of each blob.
    """

    layers: int = 6
    hidden: int = 64
    steps: int = 1000
    batch: int = 256
    lr: float = 3e-3
    samples: int = 20000
    seed: int = 0
    moons_noise: float = 0.05
    blobs_radius: float = 2.0
    blobs_std: float = 0.3
    version: int = 1

    def key(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:16]


class _Coupling(nn.Module):
    """One affine coupling layer: the coordinate ``keep`` is kept, the other scaled and shifted by functions of it."""

    def __init__(self, keep: int, hidden: int) -> None:
        super().__init__()
        self.keep = keep
        self.net = nn.Sequential(
            nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2)
        )

    def _scale_shift(self, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.net(kept)
        return torch.tanh(out[:, :1]), out[:, 1:]  # tanh bounds the log-scale (Dinh et al. Sec. 3.6 use a tanh too)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x → y`` (towards the latent) and ``log|det ∂y/∂x|``."""
        kept, moved = x[:, self.keep : self.keep + 1], x[:, 1 - self.keep : 2 - self.keep]
        log_s, t = self._scale_shift(kept)
        moved = moved * torch.exp(log_s) + t
        y = torch.cat([kept, moved], 1) if self.keep == 0 else torch.cat([moved, kept], 1)
        return y, log_s.squeeze(1)

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        kept, moved = y[:, self.keep : self.keep + 1], y[:, 1 - self.keep : 2 - self.keep]
        log_s, t = self._scale_shift(kept)
        moved = (moved - t) * torch.exp(-log_s)
        return torch.cat([kept, moved], 1) if self.keep == 0 else torch.cat([moved, kept], 1)


class RealNVP(nn.Module):
    """2-D Real NVP: affine coupling layers alternating which coordinate they keep. ``forward`` maps data to the
    latent (density estimation), :meth:`sample_from` maps latent points to data."""

    def __init__(self, layers: int, hidden: int) -> None:
        super().__init__()
        self.couplings = nn.ModuleList(_Coupling(i % 2, hidden) for i in range(layers))

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        log_det = torch.zeros(len(x), dtype=x.dtype)
        for c in self.couplings:
            x, ld = c(x)
            log_det = log_det + ld
        return -0.5 * (x * x).sum(1) - np.log(2 * np.pi) + log_det

    @torch.no_grad()
    def sample_from(self, z: torch.Tensor) -> torch.Tensor:
        for c in reversed(self.couplings):
            assert isinstance(c, _Coupling)
            z = c.inverse(z)
        return z


def target_samples(modality: str, n: int, seed: int, config: FlowConfig = FlowConfig()) -> np.ndarray:
    """``n`` standardised samples of a target distribution: ``moons`` or ``blobs5`` (see the module docstring)."""
    from sklearn.datasets import make_blobs, make_moons

    if modality == "moons":
        x, _ = make_moons(n, noise=config.moons_noise, random_state=seed)
    elif modality == "blobs5":
        angles = np.pi / 2 + 2 * np.pi * np.arange(5) / 5
        centres = config.blobs_radius * np.stack([np.cos(angles), np.sin(angles)], 1)
        x, _ = make_blobs(n, centers=centres, cluster_std=config.blobs_std, random_state=seed)
    else:
        raise ValueError(f"modality must be one of {MODALITIES}, but got {modality=}")
    return ((x - x.mean(0)) / x.std(0)).astype(np.float32)


def _fit(modality: str, cfg: FlowConfig) -> RealNVP:
    torch.manual_seed(cfg.seed)
    flow = RealNVP(cfg.layers, cfg.hidden)
    data = torch.as_tensor(target_samples(modality, cfg.samples, cfg.seed, cfg))
    g = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(flow.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    for _ in range(cfg.steps):
        batch = data[torch.randint(len(data), (cfg.batch,), generator=g)]
        loss = -flow.log_prob(batch).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return flow.eval()


@functools.cache
def _trained_in_process(config: FlowConfig) -> tuple[RealNVP, ...]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same weights on every machine and in every worker
    try:
        rng_state = torch.get_rng_state()
        flows = tuple(_fit(m, config) for m in MODALITIES)
        torch.set_rng_state(rng_state)  # fitting must not move the trial's own random stream
        return flows
    finally:
        torch.set_num_threads(threads)


#: The flows the ``flows2d`` dataset uses.
DEFAULT_FLOWS = FlowConfig()


def trained_flows(cache_dir: str | None = None, config: FlowConfig | None = None) -> tuple[RealNVP, ...]:
    """The two fitted flows (moons, blobs5) of ``config`` (default :data:`DEFAULT_FLOWS`): from ``cache_dir`` if
    it holds them, else fitted (once per process) and, with a ``cache_dir``, written there atomically."""
    config = config or DEFAULT_FLOWS
    path = Path(cache_dir) / f"flows2d-{config.key()}.pt" if cache_dir else None
    if path is not None and path.is_file():
        states = torch.load(path, map_location="cpu", weights_only=True)
        flows = tuple(RealNVP(config.layers, config.hidden) for _ in MODALITIES)
        for flow, state in zip(flows, states):
            flow.load_state_dict(state)
        return tuple(f.eval() for f in flows)
    flows = _trained_in_process(config)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            torch.save([f.state_dict() for f in flows], tmp)
        os.replace(tmp.name, path)  # atomic: concurrent trials never read half a file
    return flows


class FirstView:
    """Eval/single-view transform of a paired item: its first modality (picklable, unlike a lambda)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x[0]


def _sectors(z: np.ndarray) -> np.ndarray:
    angle = np.arctan2(z[:, 1], z[:, 0]) % (2 * np.pi)
    return np.minimum((angle / (2 * np.pi) * NUM_SECTORS).astype(np.int64), NUM_SECTORS - 1)


def paired_split(z: np.ndarray, flows: tuple[RealNVP, ...]) -> LabeledSplit:
    zt = torch.as_tensor(z)
    views = [torch.cat([flow.sample_from(zt), torch.full((len(z), 1), float(i))], 1) for i, flow in enumerate(flows)]
    items = torch.stack(views, 1).float()  # (n, 2 modalities, [x, y, modality])
    labels = _sectors(z)
    return LabeledSplit(items=items, labels=labels, true_labels=labels.copy(), paired=True, latent=z)


def load_flows2d_splits(spec: DatasetSpec) -> DatasetSplits:
    flows = trained_flows(spec.root)
    rng = np.random.default_rng(_DATA_SEED)
    z_train = rng.standard_normal((N_TRAIN, 2)).astype(np.float32)
    z_test = rng.standard_normal((N_TEST, 2)).astype(np.float32)
    return DatasetSplits(
        name="flows2d",
        train=paired_split(z_train, flows),
        test=paired_split(z_test, flows),
        input_shape=(3,),
        train_transform=FirstView(),  # a single-view family trains on the moons alone
        eval_transform=FirstView(),
    )
