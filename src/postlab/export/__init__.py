"""Export: a run's or a sweep's raw outputs as tidy, typed tables, for analysis elsewhere.

``tables`` declares the tables (every column with its type and meaning) and ``rows`` and
``columnar`` build them from records and plans, row by row or a batch of seeds at a time
(pure: one row per observation, every registered contract scored); ``loaded`` reads
and checks a run as the command line does and gives ``postlab.load_run``'s typed view with
DataFrames; ``files`` turns tables into Parquet or CSV bytes with ``schema.json`` and reads
them back. The schema is documented in docs/export.md.
"""
