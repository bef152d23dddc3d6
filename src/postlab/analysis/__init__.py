"""Numbers computed from a record's raw rows: metrics and the summary (``metrics``), every
aggregate a report shows (``aggregate``), and the worked answers (``exercises``).
"""
