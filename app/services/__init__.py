"""Application services: what the API and the status page do, without HTTP.

Creation (one path for one job and a batch, keyed or not, owning its connection and
transaction), reading a job's status and its views, the shared feeds behind held reads
and event streams, admission, the kinds' view and cursor paging. A service answers with
typed outcomes or raises a :class:`~atlas_jobs._app.services.refusals.Refusal`; the API
layer maps those to HTTP (``atlas_jobs._app.api.problems``). Nothing here imports FastAPI
or the API layer.
"""
