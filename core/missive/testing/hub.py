"""A stand-in for the Hugging Face Hub, for tests of ``hf://`` references
with no network (Missive's tests, and plugin authors'): point ``HF_ENDPOINT`` at it.

It answers what ``huggingface_hub`` asks (``HfApi.list_repo_tree``,
``hf_hub_download``, ``snapshot_download``) the way huggingface.co does:

* ``GET /api/models/OWNER/NAME/tree/REVISION[/PATH]``: the files as JSON
  (``type``, ``path``, ``size``, ``oid``, ``lfs``);
* ``GET /api/models/OWNER/NAME[/revision/REVISION]``: the repository
  (``sha``: the commit, ``siblings``);
* ``HEAD`` and ``GET /OWNER/NAME/resolve/REVISION/PATH``: a file, with
  ``X-Repo-Commit``, ``ETag`` (its SHA-256, as for LFS files) and
  ``Content-Length``; ``Range`` requests (resumed downloads) get a 206;
* errors with the ``X-Error-Code`` header huggingface_hub maps to its
  exceptions: ``RepoNotFound`` (404), ``GatedRepo`` (403, unless the request
  has the repository's token), ``EntryNotFound`` (404),
  ``RevisionNotFound`` (404).

Files are real files on disk (the packaged SmolLM2 GGUF...) or bytes.
Every request is recorded in ``Hub.requests`` (method, path, range).
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from missive.testing import start_http_server, stop_http_server

__all__ = ["Hub", "Repo"]

_CHUNK = 1 << 20


@dataclass
class Repo:
    """A repository: path in the repository -> a file on disk or bytes.
    ``token``: set, the repository is gated and only that bearer token reads it."""

    files: dict[str, Path | bytes]
    token: str | None = None
    commit: str = ""

    def __post_init__(self) -> None:
        digest = hashlib.sha1(json.dumps(sorted(self.files)).encode())
        self.commit = self.commit or digest.hexdigest()
        self._sha: dict[str, str] = {}

    def size(self, name: str) -> int:
        data = self.files[name]
        return data.stat().st_size if isinstance(data, Path) else len(data)

    def sha256(self, name: str) -> str:
        if name not in self._sha:
            data = self.files[name]
            h = hashlib.sha256()
            if isinstance(data, Path):
                with open(data, "rb") as f:
                    for chunk in iter(lambda: f.read(_CHUNK), b""):
                        h.update(chunk)
            else:
                h.update(data)
            self._sha[name] = h.hexdigest()
        return self._sha[name]

    def read(self, name: str, start: int, end: int) -> bytes:
        data = self.files[name]
        if isinstance(data, bytes):
            return data[start:end]
        with open(data, "rb") as f:
            f.seek(start)
            return f.read(end - start)


@dataclass
class Hub:
    """The stand-in server: ``repos`` by ``OWNER/NAME``; start it with
    :meth:`start` (returns the URL for ``HF_ENDPOINT``), stop with :meth:`stop`."""

    repos: dict[str, Repo]
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: Bytes of a file body sent before the connection is cut (once), to
    #: test resumed downloads; None: whole bodies.
    cut_after: int | None = None
    #: The base URL once started.
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self._server, self.url = start_http_server(Handler)
        return self.url

    def stop(self) -> None:
        stop_http_server(self._server)

    def downloads(self, name: str) -> list[str | None]:
        """The ``Range`` header of every GET of a file named ``name``."""
        return [rng for method, path, rng in self.requests if method == "GET" and path.endswith("/" + name)]


_TREE = re.compile(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$")
_INFO = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


class _Handler(BaseHTTPRequestHandler):
    hub: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, data: Any, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _repo(self, repo_id: str, revision: str | None) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.token is not None and self.headers.get("authorization") != f"Bearer {repo.token}":
            self._error(
                403,
                "GatedRepo",
                f"Access to model {repo_id} is restricted and you are not in the authorized list.",
            )
            return None
        if revision not in (None, "main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo

    def do_HEAD(self) -> None:
        self._route()

    def do_GET(self) -> None:
        self._route()

    def _route(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        self.hub.requests.append((self.command, path, self.headers.get("range")))
        if m := _TREE.match(path):
            repo = self._repo(m.group(1), m.group(2))
            if repo is not None:
                prefix = (m.group(3) or "").strip("/")
                items = [
                    {
                        "type": "file",
                        "oid": hashlib.sha1(name.encode()).hexdigest(),
                        "size": repo.size(name),
                        "path": name,
                        "lfs": {"oid": repo.sha256(name), "size": repo.size(name), "pointerSize": 134},
                    }
                    for name in sorted(repo.files)
                    if not prefix or name.startswith(prefix + "/")
                ]
                self._json(items)
            return
        if m := _INFO.match(path):
            repo = self._repo(m.group(1), m.group(2))
            if repo is not None:
                self._json(
                    {
                        "id": m.group(1),
                        "modelId": m.group(1),
                        "sha": repo.commit,
                        "private": False,
                        "gated": repo.token is not None and "auto",
                        "disabled": False,
                        "siblings": [{"rfilename": name} for name in sorted(repo.files)],
                    }
                )
            return
        if m := _RESOLVE.match(path):
            repo = self._repo(m.group(1), m.group(2))
            if repo is None:
                return
            name = m.group(3)
            if name not in repo.files:
                self._error(404, "EntryNotFound", f"{name} does not exist on \"{m.group(2)}\"")
                return
            self._file(repo, name)
            return
        self._error(404, "NotFound", f"no route {path}")

    def _file(self, repo: Repo, name: str) -> None:
        size = repo.size(name)
        start, end, status = 0, size, 200
        rng = self.headers.get("range")
        if rng and (m := re.match(r"bytes=(\d+)-(\d*)$", rng)):
            start = int(m.group(1))
            end = int(m.group(2)) + 1 if m.group(2) else size
            status = 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("ETag", f'"{repo.sha256(name)}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        cut = self.hub.cut_after
        pos = start
        while pos < end:
            stop = min(end, pos + _CHUNK)
            if cut is not None and pos - start + (stop - pos) > cut:
                self.wfile.write(repo.read(name, pos, start + cut))
                self.hub.cut_after = None
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(repo.read(name, pos, stop))
            pos = stop
