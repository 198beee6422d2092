"""Run in a fresh process by `test_walk.py`: trace the first call of a decorated function to
its first storage request, against a Blob endpoint of this file's own (a few lines of HTTP
answering as the service does), and print what ran as JSON.

    python walk_child.py once|each

Counted: every line of the library (files under the `blobsingleton` package) run in any thread
from the call to the moment the endpoint receives the first request (distinct file and line
pairs; decoration not counted), and every request the endpoint receives during the call."""

from __future__ import annotations

import email.utils
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Endpoint(BaseHTTPRequestHandler):
    """Block blobs in a dict, with the service's conditional writes and headers."""

    blobs: dict[str, tuple[bytes, str, dict[str, str]]] = {}
    requests: list[str] = []
    first = threading.Event()
    etags = iter(range(1, 1_000_000))

    def log_message(self, *args: Any) -> None:
        pass

    def _count(self) -> str:
        Endpoint.requests.append(f"{self.command} {urlsplit(self.path).path}")
        Endpoint.first.set()
        return urlsplit(self.path).path

    def _answer(self, status: int, headers: dict[str, str] | None = None,
                body: bytes = b"", code: str | None = None) -> None:  # fmt: skip
        self.send_response(status)
        self.send_header("Date", email.utils.formatdate(usegmt=True))
        self.send_header("x-ms-request-id", "walk")
        if code:
            self.send_header("x-ms-error-code", code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _written(self, etag: str) -> dict[str, str]:
        return {"ETag": etag, "Last-Modified": email.utils.formatdate(usegmt=True)}

    def do_PUT(self) -> None:
        path = self._count()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if "restype=container" in self.path:
            self._answer(201, self._written('"c"'))
            return
        existing = Endpoint.blobs.get(path)
        if self.headers.get("If-None-Match") == "*" and existing is not None:
            self._answer(409, code="BlobAlreadyExists")
            return
        match = self.headers.get("If-Match")
        if match is not None and (existing is None or existing[1] != match):
            self._answer(412, code="ConditionNotMet")
            return
        etag = f'"{next(Endpoint.etags)}"'
        meta = {k: v for k, v in self.headers.items() if k.lower().startswith("x-ms-meta-")}
        Endpoint.blobs[path] = (body, etag, meta)
        self._answer(201, self._written(etag))

    def do_GET(self) -> None:
        path = self._count()
        if "comp=list" in self.path:
            xml = (f'<?xml version="1.0" encoding="utf-8"?><EnumerationResults '
                   f'ServiceEndpoint="http://x/{ACCOUNT}"><Blobs/><NextMarker/>'
                   "</EnumerationResults>").encode()  # fmt: skip
            self._answer(200, {"Content-Type": "application/xml"}, xml)
            return
        existing = Endpoint.blobs.get(path)
        if existing is None:
            self._answer(404, code="BlobNotFound")
            return
        body, etag, meta = existing
        self._answer(200, {**self._written(etag), **meta, "x-ms-blob-type": "BlockBlob"}, body)

    def do_DELETE(self) -> None:
        path = self._count()
        Endpoint.blobs.pop(path, None)
        self._answer(202)


class Tracer:
    """Library lines run (file, line) until the endpoint's first request, in every thread."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.lines: set[tuple[str, int]] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if Endpoint.first.is_set():
            return None
        if not frame.f_code.co_filename.startswith(self.package):
            return None  # (a call into the library from here is traced by its own frame)
        return self._local

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if Endpoint.first.is_set():
            return None
        if event == "line":
            self.lines.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local


def main(path: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["AzureWebJobsStorage"] = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint=http://127.0.0.1:{server.server_address[1]}/{ACCOUNT};"
    )
    os.environ.setdefault("BLOBSINGLETON_NAMESPACE", "walk")

    import blobsingleton
    from blobsingleton import once

    package = os.path.dirname(blobsingleton.__file__) + os.sep

    @once("{order_id}")
    def ship(order_id: str) -> str:
        return f"shipped {order_id}"

    tracer = Tracer(package)
    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        if path == "once":
            outcome: Any = ship(order_id="A-1")
        else:
            outcome = ship.each(["A-1", "A-2"]).values()  # type: ignore[attr-defined]
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    time.sleep(0.05)  # a request a thread of the library sent after the call would show
    files = sorted({os.path.relpath(f, package) for f, _ in tracer.lines})
    print(json.dumps({
        "files": files, "lines": len(tracer.lines), "requests": Endpoint.requests,
        "per_file": {f: sum(1 for g, _ in tracer.lines if os.path.relpath(g, package) == f)
                     for f in files},
        "outcome": outcome, "threads": sorted(t.name for t in threading.enumerate()),
        **({"detail": sorted((os.path.relpath(f, package), n) for f, n in tracer.lines)}
           if os.environ.get("WALK_DETAIL") else {}),
    }))  # fmt: skip
    server.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
