"""An independent solver of BSPML's w-subproblem (Eq. 6 with the box 0 ≤ w ≤ 1): scipy's L-BFGS-B from a given
start, tight tolerances. The test of the converged w-step and ``benchmarks/bspml_wstep_auroc.py`` both measure the
loop's weights against it."""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import minimize

from trainables.families.self_paced import WeightProblem, denoising_objective, full_gradient

__all__ = ["lbfgsb_weights"]


def lbfgsb_weights(problem: WeightProblem, start: torch.Tensor) -> torch.Tensor:
    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        w = torch.from_numpy(x)
        return float(denoising_objective(problem, w)), full_gradient(problem, w).numpy()

    opts = {"maxiter": 20000, "maxfun": 50000, "ftol": 1e-15, "gtol": 1e-12}
    res = minimize(fun, start.numpy(), jac=True, method="L-BFGS-B", bounds=[(0.0, 1.0)] * start.numel(), options=opts)
    return torch.from_numpy(res.x)
