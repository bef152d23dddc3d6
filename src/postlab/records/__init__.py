"""Records: the format every run writes and every reader checks, below the engines that
write it. Reading and writing a record and its run folder (``record``), its typed models and
one validator (``models``), where a record does not fit its plan (``conformance``), the
record writer and the results kept for resume (``writer``, ``kept``), a folder opened and
checked once for every reader (``opened``), digests taken as parts are produced
(``integrity``), the run fingerprint, the summary computed from raw rows (``metrics``),
row-by-row comparison for ``reproduce`` (``compare``) and re-scoring under other contracts.
"""
