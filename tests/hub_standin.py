"""A stand-in of the Hugging Face hub's HTTP API, on a loopback port: just what huggingface_hub calls
to search, describe a repo and download a file (ETag, X-Repo-Commit, Range), with switches for the
failures a real hub has (a gated repo, a dropped connection, a server that ignores Range)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

COMMIT = "a" * 40


@dataclass
class StandinRepo:
    files: dict[str, bytes]
    downloads: int = 0
    likes: int = 0
    gated: bool = False
    claimed_sizes: dict[str, int] = field(default_factory=dict)  # a size the API says, not the file's


@dataclass
class HubStandin:
    repos: dict[str, StandinRepo] = field(default_factory=dict)
    drop_first_get: bool = False  # the first GET of a file sends half of it, then drops the connection
    drop_resumes: bool = False  # every GET with a Range drops the connection before its body
    ignore_ranges: bool = False  # a GET with a Range gets 200 and the whole file (a proxy or CDN that ignores Range)
    seconds_per_kib: float = 0.0  # a slow hub: a file's body is sent a KiB at a time, with this pause
    search_pause: float = 0.0  # a hub slow to answer a search: seconds before it does
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, Range header)

    def start(self) -> str:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                standin._serve(self, head=True)

            def do_GET(self):
                standin._serve(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _serve(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        self.requests.append((h.command, path, h.headers.get("Range", "")))
        if path == "/api/models":
            return self._search(h, parse_qs(url.query))
        if path.startswith("/api/models/"):
            repo_id = path.removeprefix("/api/models/").split("/revision/")[0]
            return self._info(h, repo_id)
        if "/resolve/" in path:
            repo_id, _, rest = path.lstrip("/").partition("/resolve/")
            _revision, _, name = rest.partition("/")
            return self._file(h, repo_id, name, head)
        _send(h, 404, b"not found")

    def _search(self, h, query: dict) -> None:
        text = query.get("search", [""])[0].lower()
        time.sleep(self.search_pause)
        assert query.get("filter") == ["gguf"], query
        hits = [
            {"id": rid, "downloads": r.downloads, "likes": r.likes, "lastModified": "2025-01-02T03:04:05.000Z"}
            for rid, r in self.repos.items()
            if text in rid.lower()
        ]
        hits.sort(key=lambda hit: -hit["downloads"])
        _send(h, 200, json.dumps(hits).encode(), "application/json")

    def _info(self, h, repo_id: str) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return _repo_not_found(h)
        siblings = [{"rfilename": n, "size": repo.claimed_sizes.get(n, len(b))} for n, b in repo.files.items()]
        body = {"id": repo_id, "sha": COMMIT, "siblings": siblings, "gated": "manual" if repo.gated else False}
        _send(h, 200, json.dumps(body).encode(), "application/json")

    def _file(self, h, repo_id: str, name: str, head: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return _repo_not_found(h)
        if repo.gated:
            headers = {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access restricted"}
            return _send(h, 403, b"gated", headers=headers, head=head)  # no body after a HEAD: the connection is reused
        if name not in repo.files:
            return _send(h, 404, b"no entry", headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        data = repo.files[name]
        size = repo.claimed_sizes.get(name, len(data))
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha256(data).hexdigest()}"', "Accept-Ranges": "bytes"}
        if head:
            return _send(h, 200, b"", headers={**headers, "Content-Length": str(size)}, head=True)
        start = 0 if self.ignore_ranges else int(h.headers.get("Range", "bytes=0-").removeprefix("bytes=").split("-")[0] or 0)
        if start >= len(data) > 0:
            return _send(h, 416, b"range not satisfiable", headers={"Content-Range": f"bytes */{len(data)}"})
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if (self.drop_first_get and not start) or (self.drop_resumes and start):
            self.drop_first_get = False
            sent = body[: len(body) // 2] if not start else b""
            return _send(h, 206 if start else 200, sent, headers={**headers, "Content-Length": str(len(body))}, drop=True)
        _send(h, 206 if start else 200, body, headers=headers, pause=self.seconds_per_kib)


def _repo_not_found(h) -> None:
    _send(h, 404, b"not found", headers={"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"})


def _send(h, status: int, body: bytes, content_type="application/octet-stream", headers=None, head=False, drop=False, pause=0.0):
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    headers = dict(headers or {})
    headers.setdefault("Content-Length", str(len(body)))
    for key, value in headers.items():
        h.send_header(key, value)
    h.end_headers()
    if not head and pause:
        for at in range(0, len(body), 1024):
            h.wfile.write(body[at : at + 1024])
            h.wfile.flush()
            time.sleep(pause)
    elif not head:
        h.wfile.write(body)
    if drop:
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(2)
