"""A local stand-in for the Hugging Face Hub, for testing ``iss.hub`` and ``iss.zoo`` without the network.

An ``http.server`` on 127.0.0.1 (port chosen by the OS) answering the few endpoints huggingface_hub 2.4 uses
(read in its ``file_download.py``, ``hf_api.py`` and ``_commit_api.py``):

* ``HEAD``/``GET /[datasets/]{org}/{name}/resolve/{revision}/{path}``: the file, with the
  ``X-Repo-Commit``, ``ETag`` and ``Content-Length`` headers ``hf_hub_download`` needs; 404 with
  ``X-Error-Code: EntryNotFound`` / ``RevisionNotFound`` / ``RepoNotFound`` otherwise;
* ``POST /api/repos/create``, ``/api/validate-yaml``, ``/api/{type}s/{repo}/preupload/{rev}`` (every file
  "regular", so no LFS upload), ``/api/{type}s/{repo}/branch/{branch}`` and
  ``/api/{type}s/{repo}/commit/{rev}`` (ndjson with base64 contents): enough for ``HfApi.create_repo``,
  ``create_branch`` and ``upload_folder``;
* ``GET /api/{type}s/{repo}/revision/{rev}``: a minimal ``repo_info``.

Switches for failure tests: ``delay`` (seconds to wait before answering ``/resolve``), ``corrupt`` (paths
whose ``GET`` body is replaced by wrong bytes of the same length). ``requests`` logs ``(method, path)``.

Without a server: :func:`closed_port_url` (an endpoint that refuses connections at once) and :func:`cache_put`
(a file in a hand-built Hub cache at revision :data:`COMMIT`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

_RESOLVE = re.compile(r"^/(?:(datasets|spaces)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_API = re.compile(r"^/api/(models|datasets|spaces)/([^/]+/[^/]+)/(preupload|commit|branch|revision)/([^/]+)$")


@dataclass
class FakeRepo:
    """Branches (name -> commit) and commits (sha -> {path: bytes}) of one repo."""

    refs: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def commit(self, branch: str, files: dict[str, bytes], message: str = "") -> str:
        """Commit ``files`` on top of ``branch`` (created if missing); return the new commit sha."""
        parent = self.refs.get(branch) or self.refs.get("main")
        tree = {**self.commits.get(parent, {}), **files} if parent else dict(files)
        sha = hashlib.sha1(f"{parent}:{message}:{sorted(files)}:{len(self.commits)}".encode()).hexdigest()
        self.commits[sha] = tree
        self.refs[branch] = sha
        return sha

    def lookup(self, revision: str) -> str | None:
        """The commit sha a branch name or sha refers to."""
        return self.refs.get(revision) or (revision if revision in self.commits else None)


class FakeHub:
    """The server and its repos; use as a context manager (``with FakeHub() as hub: hub.url``)."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], FakeRepo] = {}
        self.delay = 0.0
        self.corrupt: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.hub = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        """Base URL to use as the Hub endpoint."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def repo(self, repo_id: str, repo_type: str = "model") -> FakeRepo:
        """The repo, created empty if missing."""
        return self.repos.setdefault((repo_type, repo_id), FakeRepo())

    def add_file(
        self, repo_id: str, path: str, data: bytes, *, repo_type: str = "model", branch: str = "main"
    ) -> str:
        """Commit one file to ``repo_id`` on ``branch``; return the new commit sha."""
        return self.repo(repo_id, repo_type).commit(branch, {path: data}, f"add {path}")

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()  # wakes handlers sleeping on `delay`
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    """Request handler: dispatches on method and path to the fake Hub's state."""

    server: ThreadingHTTPServer

    @property
    def hub(self) -> FakeHub:
        return self.server.hub  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request log lines."""

    def do_HEAD(self) -> None:
        self._resolve(send_body=False)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if _API.match(path):
            self._api("GET", path)
        else:
            self._resolve(send_body=True)

    def do_POST(self) -> None:
        self._api("POST", urlsplit(self.path).path)

    # -------------------------------------------------------------------------------------------- downloads

    def _resolve(self, *, send_body: bool) -> None:
        """Serve a file by revision, like huggingface.co's ``/resolve`` endpoint."""
        path = urlsplit(self.path).path
        self.hub.requests.append((self.command, path))
        if self.hub.delay and self.hub.stopping.wait(self.hub.delay):
            return
        match = _RESOLVE.match(path)
        if not match:
            return self._reply(404, b"", {"X-Error-Code": "RepoNotFound"})
        kind, repo_id, revision, filename = match.groups()
        repo = self.hub.repos.get(({"datasets": "dataset", "spaces": "space"}.get(kind, "model"), repo_id))
        if repo is None:
            return self._reply(404, b"", {"X-Error-Code": "RepoNotFound"})
        commit = repo.lookup(unquote(revision))
        if commit is None:
            return self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"})
        filename = unquote(filename)
        data = repo.commits[commit].get(filename)
        if data is None:
            return self._reply(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
        if send_body and filename in self.hub.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        self._reply(200, data, headers, send_body=send_body)

    # -------------------------------------------------------------------------------------------- uploads

    def _api(self, method: str, path: str) -> None:
        """The write API (and ``repo_info``); writes need an ``Authorization: Bearer`` header."""
        self.hub.requests.append((method, path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if method == "POST" and not (self.headers.get("Authorization") or "").startswith("Bearer "):
            return self._json(401, {"error": "Invalid credentials in Authorization header"})
        if path == "/api/validate-yaml":
            return self._json(200, {"errors": [], "warnings": []})
        if path == "/api/repos/create":
            payload = json.loads(body)
            repo_id = (
                f"{payload['organization']}/{payload['name']}"
                if payload.get("organization")
                else payload["name"]
            )
            key = (payload.get("type") or "model", repo_id)
            if key in self.hub.repos:
                url = f"{self.hub.url}/{repo_id}"  # the Hub names the existing repo in its 409 too
                return self._json(409, {"error": "You already created this model repo", "url": url})
            self.hub.repos[key] = FakeRepo()
            return self._json(200, {"url": f"{self.hub.url}/{repo_id}"})
        match = _API.match(path)
        if not match:
            return self._json(404, {"error": "not found"})
        kind, repo_id, action, revision = match.groups()
        repo = self.hub.repos.get((kind[:-1], repo_id))
        if repo is None:
            return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        revision = unquote(revision)
        if action == "preupload":
            files = json.loads(body)["files"]
            modes = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]
            return self._json(200, {"files": modes})
        if action == "branch":
            if revision in repo.refs:
                return self._json(409, {"error": "Reference already exists"})
            repo.refs[revision] = repo.refs.get("main") or repo.commit("main", {}, "initial commit")
            return self._json(200, {})
        if action == "revision":
            commit = repo.lookup(revision)
            if commit is None:
                return self._json(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
            siblings = [{"rfilename": p} for p in sorted(repo.commits[commit])]
            return self._json(200, {"id": repo_id, "sha": commit, "siblings": siblings})
        return self._commit(repo, repo_id, revision, body)

    def _commit(self, repo: FakeRepo, repo_id: str, branch: str, body: bytes) -> None:
        """Apply an ndjson commit payload of header + base64 ``file`` lines."""
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        files = {}
        for line in lines:
            if line["key"] == "file":
                files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
            elif line["key"] != "header":
                return self._json(400, {"error": f"the fake Hub does not support {line['key']!r}"})
        sha = repo.commit(branch, files, lines[0]["value"]["summary"])
        self._json(200, {"commitUrl": f"{self.hub.url}/{repo_id}/commit/{sha}", "commitOid": sha,
                         "pullRequestUrl": None})  # fmt: skip

    # -------------------------------------------------------------------------------------------- replies

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        self._reply(
            status, json.dumps(payload).encode(), {"Content-Type": "application/json", **(headers or {})}
        )

    def _reply(self, status: int, body: bytes, headers: dict[str, str], *, send_body: bool = True) -> None:
        """Send status, headers (with ``Content-Length``) and the body; a client that gave up is ignored."""
        try:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


# ------------------------------------------------------------------------- dead endpoint, hand-built cache

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def closed_port_url() -> str:
    """A local URL nothing listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def cache_put(cache: Path, repo_id: str, path: str, data: bytes, *, repo_type: str = "model") -> Path:
    """Put a file into a hand-built Hub cache (refs/main -> snapshots/<commit>/<path> -> blobs/<sha256>)."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    pointer = repo / "snapshots" / COMMIT / path
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.symlink_to(blob)
    return pointer
