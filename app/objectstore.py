"""The S3-compatible result store (AWS S3, MinIO, Ceph, moto...), selected with
``ATLAS_RESULT_STORE=s3``: API and workers on different machines share results through
it (the filesystem store keeps them on one machine's disk).

Keys, under ``ATLAS_S3_PREFIX`` in ``ATLAS_S3_BUCKET``::

    staging/<job_id>/<name>                   private: partial and staged outputs
    published/<owner>/<job_id>/<name>         copied there by publication

Atomic publication keeps its meaning: each object is written whole (a PUT is all or
nothing), publication copies the staged objects to the published keys while the
publishing transaction holds the job row lock, and **the commit decides**: a download
is served only for a job whose delivery is ``available`` and only for the names its
result reference lists. A crash between the copy and the commit leaves objects that
nothing can reach; the next attempt's publication replaces them, and the sweeper's
orphan pass removes those of jobs that end otherwise. Each object carries its SHA-256
in its metadata (``x-amz-meta-sha256``), written with it.

The store is synchronous (boto3), like the filesystem store: every caller already runs
store calls in a worker thread (``asyncio.to_thread``), so the interface stays the same
for both; boto3 clients are thread-safe. Credentials come from the usual AWS sources
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an instance role).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import (
    PublishedEntry,
    PublishedFile,
    StorageError,
    StoredFile,
    owner_dir_name,
    safe_name,
)

CHUNK_BYTES = 1 << 16


class S3Store:
    """:class:`atlas_jobs._app.storage.ResultStore` on an S3-compatible bucket (module doc)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Store:
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise StorageError(
                "ATLAS_RESULT_STORE=s3 needs boto3: pip install 'atlas-jobs[s3]'"
            ) from exc
        assert settings.s3_bucket is not None  # the settings refuse s3 without a bucket
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 5, "mode": "standard"},
            ),
        )
        return cls(client, settings.s3_bucket, settings.s3_prefix)

    # -- keys ---------------------------------------------------------------------------

    def _staging(self, job_id: uuid.UUID) -> str:
        return f"{self.prefix}staging/{job_id}/"

    def _published(self, owner: str, job_id: uuid.UUID) -> str:
        return f"{self.prefix}published/{owner_dir_name(owner)}/{job_id}/"

    def _keys(self, prefix: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        ):
            found.extend(page.get("Contents", []))
        return found

    def _children(self, prefix: str) -> list[str]:
        """The next path segment of every key under ``prefix`` (a "directory" listing)."""
        names: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, Delimiter="/"
        ):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(prefix) :].rstrip("/"))
        return names

    def _delete_under(self, prefix: str) -> None:
        keys = [{"Key": item["Key"]} for item in self._keys(prefix)]
        for start in range(0, len(keys), 1000):
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True}
            )

    def _head(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            head: dict[str, Any] = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
                return None
            raise
        return head

    def _describe(self, prefix: str) -> list[StoredFile]:
        files = []
        for item in sorted(self._keys(prefix), key=lambda item: str(item["Key"])):
            name = str(item["Key"])[len(prefix) :]
            head = self._head(item["Key"])
            if head is None:
                continue
            digest = head.get("Metadata", {}).get("sha256")
            if digest is None:  # written by something else: hash it once
                body = self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"]
                digest = hashlib.sha256(body.read()).hexdigest()
            files.append(StoredFile(name, int(head["ContentLength"]), digest))
        return files

    # -- the ResultStore interface --------------------------------------------------------

    def write_staged(self, job_id: uuid.UUID, name: str, data: bytes) -> StoredFile:
        digest = hashlib.sha256(data).hexdigest()
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._staging(job_id) + safe_name(name),
            Body=data,
            Metadata={"sha256": digest},
        )
        return StoredFile(name, len(data), digest)

    def has_staged(self, job_id: uuid.UUID, name: str) -> bool:
        return self._head(self._staging(job_id) + safe_name(name)) is not None

    def read_staged(self, job_id: uuid.UUID, name: str) -> bytes:
        key = self._staging(job_id) + safe_name(name)
        data: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return data

    def staged_files(self, job_id: uuid.UUID) -> list[StoredFile]:
        return self._describe(self._staging(job_id))

    def publish(self, owner: str, job_id: uuid.UUID) -> list[StoredFile]:
        source = self._staging(job_id)
        target = self._published(owner, job_id)
        staged = self._keys(source)
        if not staged:
            published = self._describe(target)
            if published:  # an earlier publication copied them; its commit failed
                return published
            raise StorageError(f"nothing staged for job {job_id}")
        self._delete_under(target)  # a failed earlier publication's copies
        for item in staged:
            name = str(item["Key"])[len(source) :]
            self.client.copy_object(
                Bucket=self.bucket,
                Key=target + name,
                CopySource={"Bucket": self.bucket, "Key": item["Key"]},
                MetadataDirective="COPY",
            )
        self._delete_under(source)
        return self._describe(target)

    def published_file(self, owner: str, job_id: uuid.UUID, name: str) -> PublishedFile | None:
        try:
            key = self._published(owner, job_id) + safe_name(name)
        except StorageError:
            return None
        head = self._head(key)
        if head is None:
            return None

        def chunks() -> Iterator[bytes]:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                yield from body.iter_chunks(CHUNK_BYTES)
            finally:
                body.close()

        return PublishedFile(int(head["ContentLength"]), chunks=chunks)

    def remove_published(self, owner: str, job_id: uuid.UUID) -> None:
        self._delete_under(self._published(owner, job_id))

    def remove_staging(self, job_id: uuid.UUID) -> None:
        self._delete_under(self._staging(job_id))

    def staged_job_ids(self) -> list[uuid.UUID]:
        found = []
        for name in self._children(f"{self.prefix}staging/"):
            try:
                found.append(uuid.UUID(name))
            except ValueError:
                continue
        return found

    def published_entries(self) -> list[PublishedEntry]:
        found: list[PublishedEntry] = []
        top = f"{self.prefix}published/"
        for owner in self._children(top):
            for name in self._children(f"{top}{owner}/"):
                try:
                    found.append(PublishedEntry(owner, uuid.UUID(name)))
                except ValueError:
                    continue
        return found

    def remove_published_entry(self, entry: PublishedEntry) -> None:
        self._delete_under(f"{self.prefix}published/{entry.owner_dir}/{entry.job_id}/")
