"""The HTTP layer under faults a real bucket or the network between can produce, against real
SeaweedFS (s3://) and fake-gcs-server (gs://), with a proxy of ours in between:

- a connection that drops as a small upload is sent is retried, and the checkpoint written
  restores (issue 25 item 5: libcurl could not rewind the body and gave up after 1 attempt);
- a download cut short on every attempt is a storage failure (exit 3) on both drivers, never
  a damaged input (exit 4) (item 6);
- a server or proxy that echoes the request in its error answer gets none of the process's
  credentials printed (item 7);
- a server that accepts and never answers fails within the time budget, and the line names
  the endpoint (item 8)."""
import dataclasses
import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

import s3_fixtures
import test_s3
from test_s3 import adam_checkpoint  # noqa: F401  (a fixture)
from gcs_fixtures import upload_tree, use_emulator
from gcs_servers import FakeGcs, TokenServer, make_service_account
from test_unroll import run_unroll as run_unroll_gs

GS_BUCKET = "ckpts"
S3 = test_s3.BUCKET
FAST = {"UNROLL_HTTP_BACKOFF_MS": "5", "UNROLL_HTTP_TIMEOUT_S": "5"}

s3 = s3_fixtures.server_fixture(S3)


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(GS_BUCKET)
        yield server


class Proxy:
    """HTTP/1.1 (keep-alive) in front of `upstream_port`. `decide(method, path, headers)`
    says what to do with each request: "forward"; "drop" (read the request, then close the
    connection without a byte of answer); "cut" (send the answer's headers and half its body,
    then close). `log` holds (method, path, content-range, action) of each request."""

    def __init__(self, upstream_port: int, decide, rewrite_location: str | None = None):
        self.upstream_port, self.decide = upstream_port, decide
        self.rewrite_location = rewrite_location
        self.log: list[tuple[str, str, str, str]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                with proxy.lock:
                    action = proxy.decide(self.command, self.path, self.headers)
                    proxy.log.append((self.command, self.path,
                                      self.headers.get("Content-Range", ""), action))
                if action == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, data = s3_fixtures.forward(self, proxy.upstream_port, body)
                if proxy.rewrite_location:
                    headers = [(k, v.replace(proxy.rewrite_location, proxy.url)
                                if k.lower() == "location" else v) for k, v in headers]
                s3_fixtures.answer_head(self, status, headers, len(data))
                if self.command == "HEAD":
                    return
                if action == "cut" and len(data) > 1:
                    self.wfile.write(data[:len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = s3_fixtures.serve(Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def drop_first_upload_attempt():
    """A decide function: the first attempt of every upload (S3 PUT or multipart POST, GCS
    upload POST or resumable PUT) has its connection dropped; the next attempt goes through."""
    seen = set()

    def decide(method, path, headers):
        if method not in ("PUT", "POST") or (method == "POST" and not any(
                k in path for k in ("/upload/", "uploads", "uploadId="))):
            return "forward"
        key = (method, path, headers.get("Content-Range", ""))
        if key in seen:
            return "forward"
        seen.add(key)
        return "drop"

    return decide


def assert_each_drop_retried(log):
    dropped = [(m, p, r) for m, p, r, a in log if a == "drop"]
    forwarded = {(m, p, r) for m, p, r, a in log if a == "forward"}
    assert dropped, log
    assert [d for d in dropped if d not in forwarded] == [], log


# ---- item 5: small uploads whose connection drops are retried --------------------------------

def test_s3_upload_connection_dropped_once_is_retried(unroll_bin, make_fixture, s3, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "bfloat16")
    out = test_s3.fresh("drop-put")
    with Proxy(s3.port, drop_first_upload_attempt()) as proxy:
        res = test_s3.run_unroll(unroll_bin, info, info.items, out,
                                 s3.env(endpoint=proxy.url, **FAST))
        assert res.returncode == 0, res.stderr
        assert_each_drop_retried(proxy.log)
        assert any(p.endswith("/_METADATA") for m, p, _, a in proxy.log if a == "drop")
    test_s3.check_bucket_output(s3, out, info, tmp_path)


def _convert_adam(unroll_bin, items, meta, out, env):
    return subprocess.run([str(unroll_bin), str(test_s3.CONFIG), "-q",
                           f"load_full_state_path={items}", f"base_output_directory={out}",
                           "run_name=run", "force_unroll=true", "scan_layers=true",
                           "pure_nnx=false", f"base_num_decoder_layers={meta['layers']}"],
                          capture_output=True, text=True, timeout=300, env=env)


def _verify_adam(unroll_bin, items, meta, out, env):
    ver = subprocess.run([str(unroll_bin), "verify", str(items),
                          f"{out}/run/checkpoints/0/items", str(test_s3.CONFIG),
                          "pure_nnx=false", f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert "0 elements differ: OK" in ver.stdout + ver.stderr


def test_s3_multipart_part_dropped_once_is_retried(unroll_bin, s3, tmp_path, adam_checkpoint):
    """Multipart uploads (5 MiB parts): initiate, every part and complete dropped once."""
    items, meta = adam_checkpoint
    out = test_s3.fresh("drop-part")
    with Proxy(s3.port, drop_first_upload_attempt()) as proxy:
        res = _convert_adam(unroll_bin, items, meta, out,
                            s3.env(endpoint=proxy.url, UNROLL_S3_PART_BYTES=str(5 << 20),
                                   **FAST))
        assert res.returncode == 0, res.stderr
        assert_each_drop_retried(proxy.log)
        assert any("partNumber=2" in p for m, p, _, a in proxy.log if a == "drop"), proxy.log
    _verify_adam(unroll_bin, items, meta, out, s3.env())


def test_gs_upload_connection_dropped_once_is_retried(unroll_bin, gcs, tmp_path, monkeypatch,
                                                      adam_checkpoint):
    """Simple uploads (POST) and the pieces of resumable ones (PUT, 1 MiB here)."""
    items, meta = adam_checkpoint
    use_emulator(monkeypatch, gcs.url)
    monkeypatch.setenv("HOME", str(tmp_path))
    up = urllib.parse.urlsplit(gcs.url)
    out = f"gs://{GS_BUCKET}/drop-put"
    with Proxy(up.port, drop_first_upload_attempt(), rewrite_location=gcs.url) as proxy:
        env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
        env.update({"UNROLL_GCS_ENDPOINT": proxy.url, "UNROLL_GCS_CHUNK_BYTES": str(1 << 20),
                    **FAST})
        res = _convert_adam(unroll_bin, items, meta, out, env)
        assert res.returncode == 0, res.stderr
        assert_each_drop_retried(proxy.log)
        dropped = {m for m, _, _, a in proxy.log if a == "drop"}
        assert dropped == {"POST", "PUT"}, proxy.log
    _verify_adam(unroll_bin, items, meta, out, dict(os.environ))


# ---- item 6: a download cut on every attempt is exit 3 on every driver -------------------------

def cut_ranged_gets(method, path, headers):
    return "cut" if method == "GET" and headers.get("Range") else "forward"


def test_download_cut_on_every_attempt_is_exit_3_on_both_drivers(unroll_bin, make_fixture, s3,
                                                                  gcs, tmp_path, monkeypatch):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    lines = {}
    # s3://
    src = test_s3.in_bucket(s3, info)
    with Proxy(s3.port, cut_ranged_gets) as proxy:
        res = test_s3.run_unroll(unroll_bin, info, src, tmp_path / "s3",
                                 s3.env(endpoint=proxy.url, UNROLL_HTTP_RETRIES="2", **FAST))
        assert any(a == "cut" for *_, a in proxy.log)
    lines["s3"] = (res.returncode, res.stderr)
    # gs://
    use_emulator(monkeypatch, gcs.url)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert upload_tree(info.root, GS_BUCKET, "cut-in") > 0
    gs_info = dataclasses.replace(info, config={
        **info.config, info.input_key: f"gs://{GS_BUCKET}/cut-in/{info.step}/items"})
    up = urllib.parse.urlsplit(gcs.url)
    with Proxy(up.port, cut_ranged_gets) as proxy:
        monkeypatch.delenv("STORAGE_EMULATOR_HOST")
        monkeypatch.setenv("UNROLL_GCS_ENDPOINT", proxy.url)
        monkeypatch.setenv("UNROLL_HTTP_RETRIES", "2")
        for k, v in FAST.items():
            monkeypatch.setenv(k, v)
        res = run_unroll_gs(unroll_bin, gs_info, tmp_path / "gs")
        assert any(a == "cut" for *_, a in proxy.log)
    lines["gs"] = (res.returncode, res.stderr)
    print(lines)
    for scheme, bucket in (("s3", S3), ("gs", GS_BUCKET)):
        rc, err = lines[scheme]
        assert rc == 3, lines
        assert "truncated" not in err, lines
        assert len(err.strip().splitlines()) == 1, lines
        assert f"{scheme}://{bucket}/" in err and "3 attempts" in err, lines
    assert not (tmp_path / "s3" / "run" / "checkpoints" / "0").exists()
    assert not (tmp_path / "gs" / "run" / "checkpoints" / "0").exists()


# ---- item 7: no credential of ours in a quoted server answer ----------------------------------

class EchoServer:
    """Answers every request (but HEAD: 404) `status` with an error body that quotes the
    request back: the
    headers named in `first` first (as a careless server or proxy would in its message), then
    the request line, the other headers and the body."""

    def __init__(self, status=403, first=("authorization",), token_status=None):
        self.requests: list[str] = []
        owner = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode("latin-1") if n else ""
                hdrs = sorted(self.headers.items(),
                              key=lambda kv: (kv[0].lower() not in first, kv[0].lower()))
                echo = " | ".join(f"{k}: {v}" for k, v in hdrs)
                text = f"you sent: {body} {echo} {self.command} {self.path}" if \
                    self.path.startswith("/token") else \
                    f"you sent: {echo} {self.command} {self.path} {body}"
                data = text.encode()
                if self.command == "HEAD":  # no body to quote in: let the caller go on
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                owner.requests.append(text)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = s3_fixtures.serve(H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


SESSION_TOKEN = "IQoJb3JpZ2luX2VjEHoaCXVzLWVhc3QtMSJHMEUCIQunrollSessionToken"
BEARER = "ya29.a0Unroll-test-bearer-token-0123456789"
CLIENT_SECRET = "GOCSPX-unroll-client-secret-42"
REFRESH = "1//0unroll-refresh-token-abcdef"


def unroll_ls(unroll_bin, url, env, verbose=False):
    if verbose:
        env = {**env, "UNROLL_HTTP_VERBOSE": "1"}
    return subprocess.run([str(unroll_bin), "ls", url], capture_output=True, text=True,
                          env=env, timeout=60)


def gs_env(tmp_path, endpoint, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST",
                        "GCE_METADATA_HOST", "CLOUDSDK_CONFIG", "TENSORSTORE_GCS_HTTP_URL")}
    env.update({"UNROLL_GCS_ENDPOINT": endpoint, "HOME": str(tmp_path), **FAST})
    env.update(extra)
    return env


def assert_clean(res, secrets):
    out = res.stderr + res.stdout
    assert res.returncode == 3, out
    for s in secrets:
        assert s not in out, (s, out)


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_s3_echoed_request_leaks_no_credential(unroll_bin, tmp_path, verbose):
    """The session token quoted back; under UNROLL_HTTP_VERBOSE curl's header dump also shows
    the Authorization header (its signature)."""
    with EchoServer(403, first=("x-amz-security-token",)) as echo:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_ACCESS_KEY_ID": s3_fixtures.ACCESS_KEY,
                    "AWS_SECRET_ACCESS_KEY": s3_fixtures.SECRET_KEY,
                    "AWS_SESSION_TOKEN": SESSION_TOKEN, "AWS_REGION": "us-east-1",
                    "AWS_ENDPOINT_URL": echo.url, "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                    "AWS_CONFIG_FILE": "/nonexistent", **FAST})
        res = unroll_ls(unroll_bin, f"s3://{S3}/x", env, verbose)
        # the echo held them: without scrubbing they would be printed
        assert SESSION_TOKEN in echo.requests[0] and "Signature=" in echo.requests[0]
    sig = echo.requests[0].split("Signature=", 1)[1][:64]
    assert_clean(res, [SESSION_TOKEN, SESSION_TOKEN[:24], s3_fixtures.SECRET_KEY, sig])
    assert "403" in res.stderr


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_gs_echoed_bearer_token_is_not_printed(unroll_bin, tmp_path, verbose):
    with TokenServer(token=BEARER) as tok, EchoServer(403) as echo:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        tok.public_key, tok.email = pub, email
        env = gs_env(tmp_path, echo.url, GOOGLE_APPLICATION_CREDENTIALS=str(sa))
        res = unroll_ls(unroll_bin, f"gs://{GS_BUCKET}/x", env, verbose)
        assert tok.log and set(tok.log) == {"jwt"} and BEARER in echo.requests[0]
    assert_clean(res, [BEARER, BEARER[:12]])


def test_gs_token_endpoint_echo_leaks_no_jwt(unroll_bin, tmp_path):
    """A token endpoint that quotes the grant it refused: a service account's signed JWT."""
    with EchoServer(400) as tok:
        sa, _, _ = make_service_account(tmp_path, tok.url + "/token")
        env = gs_env(tmp_path, tok.url, GOOGLE_APPLICATION_CREDENTIALS=str(sa))
        res = unroll_ls(unroll_bin, f"gs://{GS_BUCKET}/x", env)
        assert "assertion=eyJ" in tok.requests[0]
    assert_clean(res, ["eyJ", "BEGIN PRIVATE"])
    assert "token request failed" in res.stderr


def test_gs_token_endpoint_echo_leaks_no_client_secret(unroll_bin, tmp_path):
    """An authorized_user file's refresh grant quoted back: client_secret and refresh_token."""
    with EchoServer(400) as tok:
        adc = tmp_path / "adc.json"
        adc.write_text(json.dumps({"type": "authorized_user", "client_id": "cid",
                                   "client_secret": CLIENT_SECRET, "refresh_token": REFRESH,
                                   "token_uri": tok.url + "/token"}))
        env = gs_env(tmp_path, tok.url, GOOGLE_APPLICATION_CREDENTIALS=str(adc))
        res = unroll_ls(unroll_bin, f"gs://{GS_BUCKET}/x", env)
        assert "client_secret=" + CLIENT_SECRET in tok.requests[0]
    assert_clean(res, [CLIENT_SECRET, "unroll-client-secret", "unroll-refresh-token"])


# ---- item 8: a server that accepts and never answers --------------------------------------------

class SilentServer:
    """Accepts connections, reads what comes, never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.requests = 0  # request lines received, over all connections
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._drain, args=(c,), daemon=True).start()

    def _drain(self, c):
        try:
            while data := c.recv(65536):
                self.requests += data.count(b" HTTP/1.1\r\n")
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_silent_server_fails_within_the_budget_naming_the_endpoint(unroll_bin, tmp_path,
                                                                  scheme):
    """A conversion whose input is on such a server, with a shortened budget (first byte 2 s,
    deadline 4 s); the defaults' bound (under two minutes) is checked by the unit test
    test_http."""
    budget = {"UNROLL_HTTP_FIRST_BYTE_S": "2", "UNROLL_HTTP_DEADLINE_S": "4",
              "UNROLL_HTTP_BACKOFF_MS": "5"}
    with SilentServer() as silent:
        if scheme == "s3":
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("AWS_", "UNROLL_HTTP_"))}
            env.update({"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret-key",
                        "AWS_ENDPOINT_URL": silent.url,
                        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                        "AWS_CONFIG_FILE": "/nonexistent", **budget})
            url = f"s3://{S3}/x"
        else:
            env = gs_env(tmp_path, silent.url)
            env = {k: v for k, v in env.items() if not k.startswith("UNROLL_HTTP_")}
            env.update(budget)
            url = f"gs://{GS_BUCKET}/x"
        t0 = time.monotonic()
        res = subprocess.run([str(unroll_bin), str(test_s3.CONFIG),
                              f"load_parameters_path={url}/0/items",
                              f"base_output_directory={tmp_path / 'out'}", "run_name=run"],
                             capture_output=True, text=True, env=env, timeout=60)
        took = time.monotonic() - t0
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip()
    assert "\n" not in line, line
    assert f"no answer from {silent.url} within 2 s" in line, line
    assert f"{scheme}://{S3 if scheme == 's3' else GS_BUCKET}/" in line, line
    # deadline + one attempt, and slack for a slow start (sanitizers, valgrind); unbounded
    # before, about 295 s with the defaults then
    assert took < 4 + 2 + 15, (took, line)


def test_ls_of_a_silent_server_waits_out_one_budget_not_two(unroll_bin, tmp_path):
    """`unroll ls` first asks whether a multi-process run is staged there; a store that does
    not answer that question ends the command (it used to fall through to the listing and wait
    a second budget). No retries, so each budget is one request the server counts."""
    with SilentServer() as silent:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "UNROLL_HTTP_"))}
        env.update({"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret-key",
                    "AWS_ENDPOINT_URL": silent.url, "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                    "AWS_CONFIG_FILE": "/nonexistent", "UNROLL_HTTP_RETRIES": "0",
                    "UNROLL_HTTP_FIRST_BYTE_S": "1", "UNROLL_HTTP_DEADLINE_S": "2"})
        res = unroll_ls(unroll_bin, f"s3://{S3}/x/checkpoints", env)
        requests = silent.requests
    assert res.returncode == 3, res.stderr
    assert f"no answer from {silent.url}" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert requests == 1, (requests, res.stderr)
