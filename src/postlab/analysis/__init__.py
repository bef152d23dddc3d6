"""Numbers computed from records: every aggregate a report shows (``aggregate``), intervals,
hypotheses decided, the hacking onset, findings, samples judged, comparisons of versions and
of engines, and the worked answers (``exercises``, ``sequence_kl``).
"""
