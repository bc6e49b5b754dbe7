"""The built-in kinds, written on the public API alone (an import-linter contract keeps
them so): ``atlas.bundle``, ``atlas.noop`` and ``document.publish``. They are loaded
unless ``ATLAS_BUILTIN_KINDS=false``, and they are the examples of ``docs/kinds.md``."""

from atlas_jobs.builtin.bundle import bundle
from atlas_jobs.builtin.document import publish_document
from atlas_jobs.builtin.noop import noop

__all__ = ["bundle", "noop", "publish_document"]
