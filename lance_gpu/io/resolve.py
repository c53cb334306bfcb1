# SPDX-License-Identifier: Apache-2.0
"""From a dataset URI (and pylance-style ``storage_options``) to ``(store, root)``.

=============================================  ==============================================
URI                                            store, root key
=============================================  ==============================================
``/abs``, ``rel/dir``, ``~/d``, ``file:///p``,   :class:`~lance_gpu.io.local.LocalStore`, the
``file:/p``                                    absolute path
``s3://bucket/prefix`` (``s3a://``)            obstore ``S3Store(bucket)``, ``prefix``
``gs://bucket/prefix``                         obstore ``GCSStore``, ``prefix``
``az://container/p``, ``abfss://c@acct.../p``  obstore ``AzureStore``, ``p``
``memory://name/p``                            one obstore ``MemoryStore`` per ``name`` and
                                               process (renewed by a create over an
                                               existing dataset), ``p``
``http(s)://host/p``                           obstore ``HTTPStore`` (read-only), ``p``
=============================================  ==============================================

``store=`` may instead pass an :class:`~lance_gpu.io.store.ObjectStore`, an obstore store
or an fsspec file system; the URI is then the path inside it.

``storage_options`` take pylance's keys: ``aws_access_key_id``, ``aws_secret_access_key``,
``aws_session_token``, ``aws_region``, ``aws_endpoint``, ``google_service_account``,
``azure_storage_account_name``, ``azure_storage_account_key``, ... (any key obstore's
``S3Config`` / ``GCSConfig`` / ``AzureConfig`` knows, upper or lower case); client keys
``allow_http``, ``allow_invalid_certificates``, ``timeout``, ``connect_timeout``, ... ; and
retries: ``max_retries`` / ``client_max_retries``, ``retry_timeout`` /
``client_retry_timeout`` (seconds).  Keys only pylance's own reader uses (``block_size``,
``download_retry_count``...) are accepted and ignored.  The standard environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT``, ``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``...)
are read by obstore when a key is not given.
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlparse

from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.io._errors import translate
from lance_gpu.io.local import LOCAL
from lance_gpu.io.remote import FsspecStore, ObstoreStore
from lance_gpu.io.store import ObjectStore

__all__ = ["is_memory_uri", "is_object_store", "renew_memory_root", "resolve", "split_options"]

_CLIENT_KEYS = frozenset(
    {
        "allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "read_timeout",
        "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
        "proxy_excludes", "user_agent", "default_content_type", "http1_only", "http2_only",
        "http2_keep_alive_interval", "http2_keep_alive_timeout", "http2_keep_alive_while_idle",
        "randomize_addresses", "root_certificate",
    }
)
_RETRY_KEYS = {"max_retries": "max_retries", "client_max_retries": "max_retries",
               "retry_timeout": "retry_timeout", "client_retry_timeout": "retry_timeout"}
#: Keys pylance's own reader uses that have no meaning for obstore.
_IGNORED_KEYS = frozenset(
    {"block_size", "download_retry_count", "new_table_enable_v2_manifest_paths",
     "new_table_enable_stable_row_ids", "use_opendal", "allow_local_writes"}
)

_cache: dict[tuple, ObjectStore] = {}
_memory: dict[str, Any] = {}
_lock = threading.Lock()
_LOCAL = LOCAL


def is_object_store(obj: object) -> bool:
    """True for our own :class:`~lance_gpu.io.store.ObjectStore` implementations."""
    return all(hasattr(obj, a) for a in ("read_ranges", "put_if_absent", "open_writer", "stats", "uri"))


def split_options(options: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """pylance ``storage_options`` split into obstore ``(config, client_options, retry_config)``."""
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {}
    for raw_key, value in (options or {}).items():
        key = str(raw_key).lower()
        if key in _IGNORED_KEYS:
            continue
        if key in _CLIENT_KEYS:
            client[key] = value
        elif key in ("aws_allow_http", "google_allow_http", "azure_allow_http"):
            client["allow_http"] = value
        elif key in _RETRY_KEYS:
            name = _RETRY_KEYS[key]
            if name == "max_retries":
                retry[name] = int(value)
            else:
                secs = float(str(value).rstrip("s"))
                retry[name] = _dt.timedelta(seconds=secs)
        else:
            config[key] = value
    if "allow_http" in client:
        client["allow_http"] = str(client["allow_http"]).lower() in ("1", "true", "yes")
    return config, client, retry


def _wrap_user_store(store: Any) -> ObjectStore:
    if is_object_store(store):
        return store  # type: ignore[no-any-return]
    mod = type(store).__module__ or ""
    if mod.startswith("obstore"):
        name = type(store).__name__
        base = {"MemoryStore": "memory://", "LocalStore": "file://"}.get(name, f"{name.lower()}://")
        return ObstoreStore(store, base, writable=name != "HTTPStore", conditional_put=name != "HTTPStore")
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is optional
        fsspec = None
    if fsspec is not None and isinstance(store, fsspec.AbstractFileSystem):
        return FsspecStore(store)
    msg = f"store= must be a lance_gpu ObjectStore, an obstore store or an fsspec file system, not {type(store).__name__}"
    raise TypeError(msg)


def resolve(
    uri: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    store: Any = None,
) -> tuple[ObjectStore, str]:
    """The store holding ``uri`` and the dataset's root key in it.

    Parameters
    ----------
    uri : str or path
        A dataset URI (table in the module docstring).
    storage_options : dict, optional
        pylance's storage options (credentials, endpoint, timeouts, retries).
    store : optional
        A store to use instead of one built from the URI; ``uri`` is then the root inside it.
    """
    text = os.fspath(uri)
    if store is not None:
        wrapped = _wrap_user_store(store)
        if getattr(wrapped, "absolute_keys", False):  # local files: keys are absolute paths
            return wrapped, os.path.abspath(os.path.expanduser(text))
        return wrapped, text.strip("/")
    if "://" not in text and not text.startswith("file:"):
        return _LOCAL, os.path.abspath(os.path.expanduser(text))
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        return _LOCAL, os.path.abspath(unquote(parsed.path) or "/")
    root = unquote(parsed.path).strip("/")
    if scheme == "memory":
        from obstore.store import MemoryStore

        with _lock:
            mem = _memory.setdefault(parsed.netloc, MemoryStore())
            mkey: tuple = ("memory", parsed.netloc)
            found = _cache.get(mkey)
            if found is None:
                found = _cache[mkey] = ObstoreStore(mem, f"memory://{parsed.netloc}")
        return found, root
    if scheme not in ("s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl", "http", "https"):
        raise UnsupportedFeatureError(f"{text}: unsupported URI scheme {scheme}:// (see lance_gpu.io.resolve)")
    config, client, retry = split_options(storage_options)
    base = f"{'s3' if scheme == 's3a' else 'gs' if scheme == 'gcs' else scheme}://{parsed.netloc}"
    key = (base, tuple(sorted((k, str(v)) for k, v in {**config, **client, **retry}.items())))
    with _lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = _build(base, scheme, config, client, retry)
    return found, root


def renew_memory_root(uri: str) -> tuple[ObjectStore, str]:
    """A fresh ``memory://`` store for a dataset created at ``uri`` over an existing one.

    pylance builds a new, empty ``MemoryStore`` on every call that resolves a ``memory://``
    URI, so ``write_dataset(t, "memory://x")`` always creates version 1 there, while a
    dataset object keeps the store it was opened on.  Ours live per name for the process
    (a later ``dataset("memory://x")`` finds what was written); for a create over an
    existing dataset the name gets a new store holding copies of every object *outside*
    the dataset's root: the root starts empty (pylance's result), other datasets of the
    name stay, and dataset objects opened before keep the old store, whole."""
    import obstore
    from obstore.store import MemoryStore

    parsed = urlparse(uri)
    root = unquote(parsed.path).strip("/")
    prefix = root + "/" if root else ""
    with _lock:
        old = _memory.setdefault(parsed.netloc, MemoryStore())
        new = MemoryStore()
        for chunk in obstore.list(old):
            for meta in chunk:
                path = meta["path"]
                if prefix and not path.startswith(prefix):
                    obstore.put(new, path, obstore.get(old, path).bytes())
        _memory[parsed.netloc] = new
        found = _cache[("memory", parsed.netloc)] = ObstoreStore(new, f"memory://{parsed.netloc}")
    return found, root


def is_memory_uri(uri: object) -> bool:
    """Whether ``uri`` names a ``memory://`` dataset."""
    return isinstance(uri, str) and uri.lower().startswith("memory://")


def _build(base: str, scheme: str, config: dict, client: dict, retry: dict) -> ObstoreStore:
    from obstore.store import from_url


    readonly = scheme in ("http", "https")
    kwargs: dict[str, Any] = {}
    if client:
        kwargs["client_options"] = client
    if retry:
        kwargs["retry_config"] = retry
    if config and not readonly:
        kwargs["config"] = config
    try:
        raw = from_url(base, **kwargs)
    except Exception as exc:
        err = translate(exc, base, "configure")
        raise ValueError(f"{base}: bad storage_options: {err.reason}") from exc
    out = ObstoreStore(raw, base, conditional_put=not readonly, writable=not readonly)
    if scheme in ("s3", "s3a"):
        out.s3_bucket = (base.split("://", 1)[1], dict(config))
    return out
