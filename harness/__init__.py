"""What the test suite, the chaos runs and the benchmarks share to drive real Atlas Jobs
processes. Neither ``tests`` nor ``chaos`` is imported from here."""
