"""The process-wide random streams a trial draws from, seeded once and saved in every checkpoint, so a resumed
trial replays the same batches, augmentations and family draws."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["seed_everything", "rng_state", "set_rng_state"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # also drives PML's MPerClassSampler (it uses numpy's global RNG)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
