"""The RL update's math, pure functions on tensors: advantages, loss reductions, KL
estimators (``algorithms``, registries with their sources), the clipped objective
(``objective``), group statistics (``groups``) and per-token loss weights (``losses``).
"""
