"""Where a trial trains and in which number formats: the device, bf16 autocast and the channels-last layout."""

from __future__ import annotations

import torch

from trainables.schema.spec import StudySpec

__all__ = ["pick_device", "autocast_dtype", "channels_last", "trial_threads"]


def trial_threads(cpus: float) -> int:
    """Torch's intra-op threads in a trial with ``cpus`` CPUs (``resources.cpu``): one per whole CPU. The thread
    count changes how reductions are split, so the study records it (study/search/environment.py)."""
    return max(1, int(cpus))


def pick_device(spec: StudySpec) -> torch.device:
    """``cuda:0`` for a spec with GPUs on a machine that has one, else the CPU.

    Ray exposes only the GPUs it assigned to this trial (``CUDA_VISIBLE_DEVICES``), so ``cuda:0`` is ours; a spec
    without GPUs trains on the CPU even when one is visible (e.g. a trial built outside Ray).
    """
    if spec.resources.gpu > 0 and torch.cuda.is_available():
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick the fastest kernels once
        return torch.device("cuda", 0)
    return torch.device("cpu")


def autocast_dtype(device: torch.device, amp: bool) -> torch.dtype | None:
    """bf16 autocast on CUDA GPUs that support it (no loss scaling needed, unlike fp16); else none."""
    if amp and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def channels_last(device: torch.device, input_shape: tuple[int, ...]) -> bool:
    """NHWC convolutions are faster on tensor-core GPUs; on the CPU the default layout is kept."""
    return device.type == "cuda" and len(input_shape) == 3
