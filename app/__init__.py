"""Atlas Jobs: an asynchronous request-reply job service coordinated through PostgreSQL."""

__version__ = "0.1.0"
