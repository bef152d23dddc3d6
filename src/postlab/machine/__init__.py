"""The machine a run computes on: the CPU code paths that decide its bits, pinned before torch
loads, and what the record says of them (``numerics``); the device, CUDA's settings and
readiness (``device``); the source and software a record and the memos name
(``provenance``). Below everything that trains or reads a record, which all name them.
"""
