"""Errors that stop the trainer before any GPU time is spent; their message is what the user reads."""


class GrpoConfigError(ValueError):
    """The config cannot be run as written (unknown key, bad value, unreadable model or reward file)."""


class DataPrepError(ValueError):
    """An input data file cannot be turned into a training parquet file."""
