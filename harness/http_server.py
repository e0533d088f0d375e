"""A real HTTP server on 127.0.0.1 for the fetch tests: serves files from memory, honours ``Range: bytes=N-``
(206 + Content-Range, 416 past the end) and can drop the connection mid-file on demand.

``http.server``'s ``SimpleHTTPRequestHandler`` ignores ``Range``, and a dropped connection is exactly what the
resume logic must survive, so the handler is written here (about 60 lines) instead.
"""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FileServer"]


@dataclass
class FileServer:
    """``with FileServer({"/a.tgz": data}) as server: server.url("/a.tgz")``.

    Attributes:
        files: path → bytes served.
        drop_after: path → byte count: the next GET of that path sends this many bytes of the body (while announcing
            the full length) and closes the connection; consumed once.
        requests: ``(path, Range header or None)`` of every GET, for assertions about resume.
        content_types: path → Content-Type (default ``application/octet-stream``).
    """

    files: dict[str, bytes]
    drop_after: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    content_types: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> FileServer:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
                if start >= len(data) and rng:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = data[start:]
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", server.content_types.get(self.path, "application/octet-stream"))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                cut = server.drop_after.pop(self.path, None)
                self.wfile.write(body if cut is None else body[:cut])
                self.wfile.flush()
                if cut is not None:
                    self.close_connection = True

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{path}"
