"""postlab: post-training small language models with verifiable rewards, reproducibly."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "load_run"]

if TYPE_CHECKING:
    from postlab.export.loaded import load_run


def __getattr__(name: str) -> Any:
    """``postlab.load_run`` is imported on first use, so ``import postlab`` stays light."""
    if name == "load_run":
        from postlab.export.loaded import load_run

        return load_run
    raise AttributeError(f"module 'postlab' has no attribute {name!r}")
