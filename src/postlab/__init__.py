"""postlab: post-training small language models with verifiable rewards, reproducibly."""

__version__ = "0.1.0"
