"""Export: a run's or a sweep's raw outputs as tidy, typed tables, for analysis elsewhere.

``tables`` builds the tables from records and plans (pure: one row per observation, every
registered contract scored, every column declared with its type and meaning); ``loaded`` reads
and checks a run as the command line does and gives ``postlab.load_run``'s typed view with
DataFrames; ``files`` turns tables into Parquet or CSV bytes with ``schema.json`` and reads
them back. The schema is documented in docs/export.md.
"""
