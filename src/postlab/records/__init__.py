"""Records: the format every run writes and every reader checks, below the engines that
write it. Strict reading of a record and its run folder (``record``), a folder opened and
checked once for every reader (``opened``), digests taken as parts are produced
(``integrity``), the run fingerprint, the summary computed from raw rows (``metrics``),
row-by-row comparison for ``reproduce`` (``compare``) and re-scoring under other contracts.
"""
