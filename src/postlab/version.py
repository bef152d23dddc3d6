"""postlab's version, named in every record and exported table."""

__version__ = "0.1.0"
