"""What decides a study's numbers besides its spec, recorded on the parent run (tags ``env.*``, named in
:data:`trainables.schema.record.ENV_TAGS`): library versions, the CPU model and the instruction sets torch's kernels dispatch
to, the BLAS torch was built with, GPUs, torch's threads per trial and the deterministic-algorithm settings.

The same spec and seed give the same study on one machine (``search.reproducible``); on another machine floating
point may round differently (another kernel for another ISA, another library build), and a trained network
amplifies a last-bit difference over its epochs. Two studies whose ``env.*`` tags agree ran the same arithmetic;
docs/notebook/reproducibility.md says how far results moved across machines. Read on the driver: on a Ray cluster the
nodes may differ from it (each child run's Ray result names its node).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

from trainables.schema import record as R
from trainables.schema.spec import StudySpec

__all__ = ["numerics_tags", "cpu_model", "cpu_flags"]

#: CPU flags that select kernels in oneDNN, MKL/OpenBLAS and faiss (vector width, FMA, bf16/int8 units).
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile")
_PACKAGES = {
    "torch": "torch",
    "numpy": "numpy",
    "faiss": "faiss-cpu",
    "pytorch_metric_learning": "pytorch-metric-learning",
    "optuna": "optuna",
    "ray": "ray",
    "mlflow": "mlflow",
}


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:  # not Linux
        pass
    return info


def cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The :data:`_ISA_FLAGS` this CPU has, space-separated (empty where /proc/cpuinfo is missing)."""
    flags = set(_cpuinfo().get("flags", "").split())
    return " ".join(f for f in _ISA_FLAGS if f in flags)


def _version(dist: str) -> str:
    for name in (dist, "faiss-gpu") if dist == "faiss-cpu" else (dist,):
        try:
            return importlib.metadata.version(name) + ("" if name == dist else f" ({name})")
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def _faiss_simd() -> str:
    """The SIMD level of the faiss library that loaded (faiss picks an AVX512/AVX2/generic build at import)."""
    import faiss

    return str(faiss.get_compile_options()).strip()


def numerics_tags(spec: StudySpec) -> dict[str, str]:
    """The ``env.*`` tags of this machine for ``spec`` (every name of :data:`trainables.schema.record.ENV_TAGS`)."""
    import torch

    from trainables.loop.device import trial_threads

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if spec.resources.gpu else []
    config = torch.__config__.show()
    blas = next((line.split("=", 1)[1] for line in config.splitlines() if "BLAS_INFO=" in line), "unknown")
    versions = {key: _version(dist) for key, dist in _PACKAGES.items()}
    values = {
        "python": sys.version.split()[0],
        **{key: versions[key] for key in ("torch", "numpy", "faiss")},
        "faiss_simd": _faiss_simd(),
        **{key: versions[key] for key in ("pytorch_metric_learning", "optuna", "ray", "mlflow")},
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "cpu_flags": cpu_flags(),
        "torch_cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "torch_blas": blas.split(",")[0].strip(),
        "torch_threads": str(trial_threads(spec.resources.cpu)),
        "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()).lower(),
        "cudnn_deterministic": str(torch.backends.cudnn.deterministic).lower(),
        "cudnn_benchmark": str(torch.backends.cudnn.benchmark).lower(),
        "gpu": ", ".join(gpus) or "none",
        "cuda": str(torch.version.cuda) if gpus else "none",
    }
    tags = {R.ENV_PREFIX + key: value for key, value in values.items()}
    assert tuple(tags) == R.ENV_TAGS, "trainables.schema.record.ENV_TAGS and numerics_tags name the same tags, in order"
    return tags
