"""Atlas Jobs: the public API for the people who write job kinds."""

__all__: list[str] = []
