"""The exact engine: decoding and evaluation (``rollout``), SFT and RL loops (``train``), the
only place that calls ``backward()`` and ``step()``.
"""
