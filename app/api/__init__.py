"""The HTTP API (docs/protocol.md §3): FastAPI routers over the transition service."""
