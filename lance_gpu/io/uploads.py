# SPDX-License-Identifier: Apache-2.0
"""Incomplete multipart uploads on S3: listing and aborting them.

A writer killed while it streams a large file (:class:`~lance_gpu.io.remote.StreamingWriter`,
or pylance's own writer) leaves a multipart upload that is never completed: no object
appears, but the parts already sent stay stored -- and billed -- until the upload is
aborted.  ``cleanup_old_versions`` aborts those under the dataset older than its retention.

obstore (object_store) has no call that lists uploads, so these requests go through
botocore, with the credentials, region and endpoint of the dataset's ``storage_options``
(else botocore's own chain: environment, profile, instance role).  botocore is optional:
without it :func:`list_uploads` warns and finds nothing.  Other stores expire such
leftovers themselves (GCS resumable uploads after a week, Azure uncommitted blocks after
seven days) and have none to list here.
"""

from __future__ import annotations

import datetime as _dt
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lance_gpu.io._errors import translate

__all__ = ["Upload", "abort_upload", "list_uploads", "make_client"]


@dataclass(frozen=True, slots=True)
class Upload:
    """One incomplete multipart upload: the object key it would create, its id and when it
    started (UTC; ``None`` when the service does not say)."""

    key: str
    upload_id: str
    initiated: _dt.datetime | None


def _option(config: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = config.get(name)
        if value is not None and value != "":
            return str(value)
    for name in names:
        value = os.environ.get(name.upper())
        if value:
            return value
    return None


def make_client(config: Mapping[str, Any]) -> Any | None:
    """A botocore S3 client for an S3 store's obstore ``config`` (``None`` without botocore)."""
    try:
        import botocore.config
        import botocore.session
    except ImportError:
        return None
    virtual = str(_option(config, "aws_virtual_hosted_style_request", "virtual_hosted_style_request") or "").lower()
    kwargs: dict[str, Any] = {
        "region_name": _option(config, "aws_region", "region", "aws_default_region") or "us-east-1",
        "endpoint_url": _option(config, "aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"),
        "config": botocore.config.Config(
            s3={"addressing_style": "virtual" if virtual in ("1", "true", "yes") else "path"},
            retries={"max_attempts": 3},
        ),
    }
    key_id = _option(config, "aws_access_key_id", "access_key_id")
    secret = _option(config, "aws_secret_access_key", "secret_access_key")
    if key_id and secret:
        kwargs["aws_access_key_id"] = key_id
        kwargs["aws_secret_access_key"] = secret
        token = _option(config, "aws_session_token", "session_token", "aws_token", "token")
        if token:
            kwargs["aws_session_token"] = token
    return botocore.session.get_session().create_client("s3", **kwargs)


def list_uploads(client: Any | None, bucket: str, base_uri: str, prefix: str) -> list[Upload]:
    """The incomplete multipart uploads of keys beneath ``prefix`` (a folder: ``prefix/``).

    Parameters
    ----------
    client : botocore S3 client or None
        From :func:`make_client`; ``None`` (botocore is not installed) warns and finds none.
    bucket : str
        The bucket.
    base_uri : str
        ``s3://bucket``, to name the prefix in errors.
    prefix : str
        The key prefix (the dataset's root).

    Returns
    -------
    list of Upload
        Oldest first.
    """
    folder = prefix.rstrip("/") + "/" if prefix else ""
    if client is None:
        warnings.warn(
            f"{base_uri}/{folder}: incomplete multipart uploads not checked (botocore is not installed)",
            UserWarning,
            stacklevel=3,
        )
        return []
    out: list[Upload] = []
    try:
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=folder):
            for item in page.get("Uploads", []):
                when = item.get("Initiated")
                if isinstance(when, _dt.datetime) and when.tzinfo is None:
                    when = when.replace(tzinfo=_dt.UTC)
                out.append(Upload(str(item["Key"]), str(item["UploadId"]), when if isinstance(when, _dt.datetime) else None))
    except Exception as exc:
        raise translate(exc, f"{base_uri}/{folder}", "list multipart uploads") from exc
    out.sort(key=lambda u: (u.initiated or _dt.datetime.max.replace(tzinfo=_dt.UTC), u.key))
    return out


def abort_upload(client: Any, bucket: str, base_uri: str, upload: Upload) -> None:
    """Abort ``upload``: its parts are deleted (an upload already gone is no error)."""
    try:
        client.abort_multipart_upload(Bucket=bucket, Key=upload.key, UploadId=upload.upload_id)
    except Exception as exc:
        response = getattr(exc, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") == "NoSuchUpload":
            return
        raise translate(exc, f"{base_uri}/{upload.key}", "abort multipart upload") from exc
