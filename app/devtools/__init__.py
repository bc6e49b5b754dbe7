"""Tools for demos and tests that are not part of the service (the test destination)."""
