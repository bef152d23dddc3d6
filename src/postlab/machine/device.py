"""Which device a run trains on, and the settings PyTorch documents for reproducible CUDA runs.

CPU is the default, so records stay what they were. ``auto`` means CUDA where torch can use it.
cuBLAS reads ``CUBLAS_WORKSPACE_CONFIG`` when it first creates a handle, so :func:`prepare`
sets it before CUDA initialises (and before the worker server starts, which inherits it);
:func:`configure` sets the rest in whichever process runs a task. See PyTorch's notes on
reproducibility: https://pytorch.org/docs/stable/notes/randomness.html
"""

from __future__ import annotations

import os
from typing import Any

from postlab.errors import UserError

CHOICES = ("cpu", "cuda", "auto")
#: The workspace size PyTorch documents for deterministic cuBLAS.
CUBLAS_WORKSPACE = ":4096:8"


def prepare(choice: str) -> None:
    """Before torch touches CUDA: the cuBLAS workspace setting, for a choice that may use it."""
    if choice in ("cuda", "auto"):
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve(choice: str, option: str = "--device") -> str:
    """The device a choice means here; cuda where there is none is one line, nothing run."""
    if choice not in CHOICES:
        raise UserError(f"{option} {choice}: unknown; choose one of {', '.join(CHOICES)}")
    if choice == "auto":
        return "cuda" if cuda_available() else "cpu"
    if choice == "cuda" and not cuda_available():
        raise UserError(f"{option} cuda: torch finds no CUDA device on this machine "
                        "(use --device cpu, or auto to take CUDA only where it exists)")
    return choice


def configure(device: str) -> None:
    """Deterministic CUDA kernels, no autotuning and no TF32, where the run uses CUDA."""
    if device != "cuda":
        return
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def describe_cuda() -> dict[str, Any]:
    """The GPU and the settings in force, as a record's ``numerics.cuda`` stores them."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    cudnn = torch.backends.cudnn.version()
    return {
        "device_name": torch.cuda.get_device_name(),
        "capability": f"{major}.{minor}",
        "cuda_version": str(torch.version.cuda),
        "cudnn_version": str(cudnn) if cudnn is not None else "none",
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "unset"),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
    }


#: ``numerics.cuda`` fields with their names in messages; every one can change bits.
CUDA_FIELDS = {"device_name": "GPU", "capability": "GPU compute capability",
               "cuda_version": "CUDA version", "cudnn_version": "cuDNN version",
               "cublas_workspace_config": "CUBLAS_WORKSPACE_CONFIG",
               "cudnn_deterministic": "cuDNN deterministic",
               "cudnn_benchmark": "cuDNN benchmark", "tf32_matmul": "TF32 matmul",
               "tf32_cudnn": "TF32 cuDNN"}
