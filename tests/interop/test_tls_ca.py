"""Which CA bundle an HTTPS request trusts (src/kvstore/http/http.c, choose_ca), against an
HTTPS server of ours on 127.0.0.1 whose certificate a CA made here signed, reached as s3://
through AWS_ENDPOINT_URL (issue 28 item 3):

- SSL_CERT_FILE naming that CA's file: the object is read;
- CURL_CA_BUNDLE naming it: the same, and it wins over SSL_CERT_FILE (the curl tool's order);
- neither: the system's bundle does not know the CA, the connection is refused with one line
  that names the bundle and the two variables, exit 3, after one attempt (no retry helps);
- a variable naming a file that does not exist: one line, exit 3;
- libcurl's compiled-in bundle missing (a tmpfs over /etc/ssl in a mount namespace) and the CA
  at SUSE's place, /etc/ssl/ca-bundle.pem: found there with no variable set (the wheel's
  libcurl, built on Debian, on another distribution)."""
import http.server
import os
import shutil
import ssl
import subprocess
import threading
import time

import pytest

BODY = b"hello over TLS\n"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA (ca.pem) and a certificate for 127.0.0.1 it signed (leaf.pem, leaf.key)."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed (Debian package openssl)")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=unroll test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


@pytest.fixture(scope="module")
def server(pki):
    """HTTPS on 127.0.0.1: GET or HEAD of a key ending in /hello answers BODY, anything else
    404; `requests` counts the requests that got through the handshake."""
    state = {"requests": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _answer(self, body):
            state["requests"] += 1
            found = self.path.split("?", 1)[0].endswith("/hello")
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(BODY) if found else 0))
            self.end_headers()
            if body and found:
                self.wfile.write(BODY)

        def do_GET(self):
            self._answer(True)

        def do_HEAD(self):
            self._answer(False)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "leaf.pem", pki / "leaf.key")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["url"] = f"https://127.0.0.1:{srv.server_address[1]}"
    yield state
    srv.shutdown()
    srv.server_close()


def _env(server, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "SSL_CERT_", "CURL_CA_", "UNROLL_"))}
    env.update(HOME=str(tmp_path), AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test-secret",
               AWS_REGION="us-east-1", AWS_ENDPOINT_URL=server["url"],
               UNROLL_S3_ADDRESSING="path", UNROLL_HTTP_TIMEOUT_S="5",
               UNROLL_HTTP_BACKOFF_MS="5")
    env.update(extra)
    return env


def _cat(unroll_bin, env, prefix=()):
    return subprocess.run([*prefix, str(unroll_bin), "ls", "--cat", "hello", "s3://bkt/dir"],
                          env=env, capture_output=True, timeout=120)


@pytest.mark.parametrize("var", ["SSL_CERT_FILE", "CURL_CA_BUNDLE"])
def test_tls_ca__variable_names_the_bundle(unroll_bin, server, pki, tmp_path, var):
    r = _cat(unroll_bin, _env(server, tmp_path, **{var: str(pki / "ca.pem")}))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == BODY


def test_tls_ca__curl_ca_bundle_before_ssl_cert_file(unroll_bin, server, pki, tmp_path):
    r = _cat(unroll_bin, _env(server, tmp_path, CURL_CA_BUNDLE=str(pki / "ca.pem"),
                              SSL_CERT_FILE=str(tmp_path / "absent.pem")))
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == BODY


def test_tls_ca__unknown_ca_refused_in_one_line(unroll_bin, server, tmp_path):
    before = server["requests"]
    t0 = time.monotonic()
    r = _cat(unroll_bin, _env(server, tmp_path))
    err = r.stderr.decode()
    assert r.returncode == 3, err
    assert len(err.splitlines()) == 1, err
    assert "certificate" in err and "CA bundle" in err, err
    assert "SSL_CERT_FILE" in err and "CURL_CA_BUNDLE" in err, err
    assert server["requests"] == before  # no request got through
    assert time.monotonic() - t0 < 30  # refused at once, not retried through the budget
    assert r.stdout == b""


@pytest.mark.parametrize("var", ["SSL_CERT_FILE", "CURL_CA_BUNDLE"])
def test_tls_ca__missing_file_in_one_line(unroll_bin, server, tmp_path, var):
    missing = tmp_path / "no-such-ca.pem"
    r = _cat(unroll_bin, _env(server, tmp_path, **{var: str(missing)}))
    err = r.stderr.decode()
    assert r.returncode == 3, err
    assert len(err.splitlines()) == 1, err
    assert str(missing) in err and var in err, err


def test_tls_ca__found_where_suse_keeps_it(unroll_bin, server, pki, tmp_path):
    """libcurl's own bundle gone (/etc/ssl an empty tmpfs, in a private mount namespace) and
    the CA in /etc/ssl/ca-bundle.pem: found with no variable set."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no mount namespace here (unshare -m): " + probe.stderr.decode().strip())
    script = ('mount -t tmpfs none /etc/ssl && cp "$1" /etc/ssl/ca-bundle.pem && shift && '
              'exec "$@"')
    prefix = ["unshare", "-m", "sh", "-c", script, "sh", str(pki / "ca.pem")]
    r = _cat(unroll_bin, _env(server, tmp_path), prefix=prefix)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == BODY
