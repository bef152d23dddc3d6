"""The RL update's math, pure functions on tensors, written once for every engine: advantages,
loss reductions, KL estimators (``algorithms``, registries with their sources), the clipped,
KL-penalised policy loss and its statistics (``objective``), group statistics (``groups``) and
per-token loss weights (``losses``). Every function takes one model's batch or stacked members
(a leading member dimension); settings are floats, or tensors with one value per member.
"""
