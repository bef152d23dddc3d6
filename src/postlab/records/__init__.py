"""Records: strict reading of what a run wrote, digests and the run fingerprint, ``verify``,
row-by-row comparison for ``reproduce``, and re-scoring under other contracts.
"""
