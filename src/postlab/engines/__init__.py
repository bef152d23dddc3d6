"""Engines: what trains a plan's seeds, each behind one protocol and a registry (``registry``).

``exact`` trains one model per task, the reference's bits, with its loops in ``train`` (SFT
and RL, the exact engine's only ``backward()`` and ``step()``) and ``rollout`` (decoding
and evaluation); ``ensemble/`` trains many seeds, arms and plan versions as one batched
computation. Both compute the RL update with :mod:`postlab.rl` and decode with
:mod:`postlab.policies.decoding`, and step with ``optim``'s Adam; ``options`` reads the
plan's RL settings for them.
"""
