"""The HTTP API (SPEC section 3): FastAPI routers over the transition service."""
