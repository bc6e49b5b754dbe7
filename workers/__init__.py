"""The worker pool: claims jobs through PostgreSQL and runs them to completion."""
