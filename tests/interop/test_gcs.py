"""The GCS kvstore driver (src/kvstore/gcs/) against real servers on 127.0.0.1: fake-gcs-server
for the JSON API, and a local OAuth token endpoint / metadata server / credential-checking proxy
(gcs_servers.py). Driven through tests/unit/gcs/gcs_tool, the driver's thin command line."""
import json
import os
import pathlib
import subprocess
import zlib

import pytest

from gcs_servers import FakeGcs, GateProxy, TokenServer, clean_env, make_service_account

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "bkt"
# Resumable uploads in 16 MiB pieces (kvstore_gcs.h), so that a 20 MiB object takes several.
PIECES_16M = {"UNROLL_GCS_CHUNK_BYTES": str(16 << 20)}


def gcs_tool() -> pathlib.Path:
    b = pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))
    path = b / "tests" / "unit" / "gcs" / "gcs_tool"
    if not path.is_file():
        pytest.fail(f"gcs_tool not built at {path}")
    return path


def tool(env, *args, check=True):
    r = subprocess.run([str(gcs_tool()), *map(str, args)], env=env, capture_output=True,
                       timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"gcs_tool {args} exited {r.returncode}: {r.stderr.decode()}")
    return r


@pytest.fixture(scope="module")
def gcs():
    with FakeGcs() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def emu(gcs, tmp_path):
    """Environment pointing at the emulator (no credentials), HOME without an ADC file."""
    return clean_env(STORAGE_EMULATOR_HOST=gcs.url, HOME=tmp_path)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


# ---- the JSON API through the emulator ------------------------------------------------------

def test_put_get_range_size_ls_rm(gcs, emu, tmp_path):
    src = tmp_path / "v"
    data = bytes(range(256)) * 40
    src.write_bytes(data)
    url = f"gs://{BUCKET}/t1/run"
    tool(emu, "put", url, "a/b c+d%e.bin", src)
    tool(emu, "put", url, "a/z", src)
    # The object name is prefix + key, escaped on the wire, stored verbatim.
    assert gcs.get(BUCKET, "t1/run/a/b c+d%e.bin") == data
    assert tool(emu, "get", url, "a/b c+d%e.bin").stdout == data
    assert tool(emu, "range", url, "a/z", 1000, 77).stdout == data[1000:1077]
    assert tool(emu, "size", url, "a/z").stdout == f"{len(data)}\n".encode()
    assert tool(emu, "ls", url).stdout.decode().splitlines() == [
        f"a/b c+d%e.bin\t{len(data)}", f"a/z\t{len(data)}"]
    assert tool(emu, "ls", url, "a/z").stdout.decode().splitlines() == [f"a/z\t{len(data)}"]
    tool(emu, "rm", url, "a/z")
    assert gcs.names(BUCKET, "t1/") == ["t1/run/a/b c+d%e.bin"]


def test_missing_object_and_range_past_end(gcs, emu, tmp_path):
    url = f"gs://{BUCKET}/t2"
    r = tool(emu, "get", url, "nope", check=False)
    assert r.returncode == 6 and b"gs://bkt/t2/nope: no such object" in r.stderr
    gcs.put(BUCKET, "t2/small", b"0123456789")
    r = tool(emu, "range", url, "small", 5, 20, check=False)
    assert r.returncode == 1 and b"truncated" in r.stderr, r.stderr
    assert tool(emu, "range", url, "small", 2, 3).stdout == b"234"


def test_listing_follows_page_tokens(gcs, tmp_path):
    names = [f"t3/k{i:03d}" for i in range(7)]
    for n in names:
        gcs.put(BUCKET, n, n.encode())
    # The proxy shrinks every page to 2 items: 4 pages, stitched in order.
    with GateProxy(gcs.url, token=None, page=2) as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        out = tool(env, "ls", f"gs://{BUCKET}/t3").stdout.decode().splitlines()
        assert out == [f"k{i:03d}\t7" for i in range(7)]
        assert proxy.requests == 4


def test_folder_placeholders_are_not_keys(gcs, emu):
    # The console's "create folder" makes empty objects named "<dir>/": no values.
    gcs.put(BUCKET, "t8/", b"")
    gcs.put(BUCKET, "t8/dir/", b"")
    gcs.put(BUCKET, "t8/dir/v", b"123")
    assert tool(emu, "ls", f"gs://{BUCKET}/t8").stdout.decode().splitlines() == ["dir/v\t3"]


def test_one_level_listing(gcs, emu):
    """ur_kvstore_list_dir: delimiter=/ — the values one level down and each directory once
    (from "prefixes"), however many objects lie below; a folder placeholder is no value; no
    object under the prefix is "not found" (exit 6)."""
    for name in ("t10/a/x", "t10/a/y/z", "t10/a/y/w", "t10/a/yy", "t10/b", "t10/c/d/e"):
        gcs.put(BUCKET, name, b"v")
    gcs.put(BUCKET, "t10/a/", b"")
    url = f"gs://{BUCKET}/t10"
    assert tool(emu, "lsdir", url).stdout.decode().splitlines() == ["a/", "b", "c/"]
    assert tool(emu, "lsdir", url, "a/").stdout.decode().splitlines() == ["x", "y/", "yy"]
    assert tool(emu, "lsdir", url, "c/d/").stdout.decode().splitlines() == ["e"]
    assert tool(emu, "lsdir", url, "q/", check=False).returncode == 6


def test_large_write_is_a_resumable_upload(gcs, emu, tmp_path):
    data = os.urandom(20 << 20)
    src = tmp_path / "big"
    src.write_bytes(data)
    with GateProxy(gcs.url, token=None) as proxy:
        # Up to one resumable piece (UR_GCS_CHUNK_DEFAULT, 512 MiB) goes up in one request.
        tool(clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path), "put",
             f"gs://{BUCKET}/t4", "one", src)
        assert proxy.requests == 1
        # 20 MiB > 16 MiB pieces: a resumable session, then two pieces.
        tool(clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path, **PIECES_16M), "put",
             f"gs://{BUCKET}/t4", "big", src)
        assert proxy.requests == 1 + 3
    for name in ("one", "big"):
        assert gcs.get(BUCKET, f"t4/{name}") == data
        assert int(gcs.resource(BUCKET, f"t4/{name}")["size"]) == len(data)


def test_resumable_upload_survives_faults(gcs, tmp_path):
    data = os.urandom(40 << 20)  # a session start and three 16 MiB-or-less pieces
    src = tmp_path / "big"
    src.write_bytes(data)
    with GateProxy(gcs.url, token=None, status_every={503: 2}) as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path, UNROLL_HTTP_BACKOFF_MS=5,
                        **PIECES_16M)
        tool(env, "put", f"gs://{BUCKET}/t9", "big", src)
        assert proxy.injected.get(503, 0) >= 3, proxy.injected
    assert gcs.get(BUCKET, "t9/big") == data


def test_download_checked_against_crc32c(gcs, tmp_path):
    data = b"checksummed bytes" * 100
    gcs.put(BUCKET, "t5/obj", data)
    with GateProxy(gcs.url, token=None, corrupt=True) as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        r = tool(env, "get", f"gs://{BUCKET}/t5", "obj", check=False)
    assert r.returncode == 3, r.stderr
    assert f"do not match the object's CRC-32C {crc32c(data):08x}".encode() in r.stderr, r.stderr
    assert r.stdout == b""


def test_conditional_create(gcs, tmp_path):
    src = tmp_path / "v"
    src.write_bytes(b"first")
    # fake-gcs-server ignores ifGenerationMatch on uploads; the proxy answers 412 as GCS does.
    with GateProxy(gcs.url, token=None, cond=True) as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        url = f"gs://{BUCKET}/t6"
        assert tool(env, "create", url, "marker", src).stdout == b"created\n"
        src.write_bytes(b"second")
        assert tool(env, "create", url, "marker", src).stdout == b"exists\n"
    assert gcs.get(BUCKET, "t6/marker") == b"first"


def test_bad_url_and_missing_bucket(gcs, emu):
    r = tool(emu, "ls", "gs://Bad_Bucket!/x", check=False)
    assert r.returncode == 2 and b"not a valid GCS bucket name" in r.stderr
    r = tool(emu, "ls", "gs://no-such-bucket/x", check=False)
    assert r.returncode == 6 and b"no such bucket" in r.stderr, r.stderr


# ---- credentials ----------------------------------------------------------------------------

@pytest.fixture
def stocked(gcs):
    gcs.put(BUCKET, "cred/obj", b"secret")
    return f"gs://{BUCKET}/cred"


def test_service_account_jwt_checked_by_token_endpoint(gcs, stocked, tmp_path):
    with TokenServer() as tok:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        tok.public_key, tok.email = pub, email
        with GateProxy(gcs.url, token="good-token") as proxy:
            env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=sa, UNROLL_GCS_ENDPOINT=proxy.url,
                            HOME=tmp_path)
            r = tool(env, "auth", stocked)
            assert b"auth: service_account" in r.stderr
            assert tool(env, "get", stocked, "obj").stdout == b"secret"
            assert proxy.auth_seen[-1] == "Bearer good-token"
    assert tok.log == ["jwt", "jwt"]


def test_service_account_with_wrong_key_is_refused(gcs, stocked, tmp_path):
    with TokenServer() as tok:
        sa, _, email = make_service_account(tmp_path, tok.url + "/token")
        _, other_pub, _ = make_service_account(tmp_path, tok.url + "/token", name="other.json")
        tok.public_key, tok.email = other_pub, email  # the server knows another key
        with GateProxy(gcs.url) as proxy:
            env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=sa, UNROLL_GCS_ENDPOINT=proxy.url,
                            HOME=tmp_path)
            r = tool(env, "get", stocked, "obj", check=False)
            assert proxy.requests == 0
    assert r.returncode == 3
    line = r.stderr.decode()
    assert line.count("\n") == 1
    assert f"Google credentials (service_account from {sa}): token request failed" in line
    assert "HTTP 400" in line and "Invalid JWT Signature." in line
    assert tok.log == ["denied: Invalid JWT Signature."]


def test_bad_token_is_exit_3_with_a_clear_line(gcs, stocked, tmp_path):
    with TokenServer(token="stale-token") as tok:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        tok.public_key, tok.email = pub, email
        with GateProxy(gcs.url, token="good-token") as proxy:
            env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=sa, UNROLL_GCS_ENDPOINT=proxy.url,
                            HOME=tmp_path)
            r = tool(env, "get", stocked, "obj", check=False)
    assert r.returncode == 3
    line = r.stderr.decode()
    assert line.count("\n") == 1
    assert line.startswith("gcs_tool: gs://bkt/cred/obj: access denied (Google credentials: "
                           f"service_account from {sa})")
    assert "HTTP 401" in line and "Invalid Credentials" in line
    # A 401 drops the cached token and tries once more with a fresh one.
    assert tok.log == ["jwt", "jwt"]


def test_token_cached_then_refreshed_before_expiry(gcs, tmp_path):
    data = os.urandom(20 << 20)  # a resumable upload in 16 MiB pieces: three requests in one run
    src = tmp_path / "big"
    src.write_bytes(data)
    for expires_in, fetches in ((3600, 1), (200, 3)):
        with TokenServer(expires_in=expires_in) as tok:
            sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
            tok.public_key, tok.email = pub, email
            with GateProxy(gcs.url) as proxy:
                env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=sa, UNROLL_GCS_ENDPOINT=proxy.url,
                                HOME=tmp_path, **PIECES_16M)
                tool(env, "put", f"gs://{BUCKET}/t7", "big", src)
                assert proxy.requests == 3
        # 200 s left is inside the 240 s refresh margin: a new token for each request.
        assert tok.log == ["jwt"] * fetches
    assert gcs.get(BUCKET, "t7/big") == data


def test_authorized_user_from_the_well_known_file(gcs, stocked, tmp_path):
    with TokenServer() as tok, GateProxy(gcs.url) as proxy:
        adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
        adc.parent.mkdir(parents=True)
        adc.write_text(json.dumps({"type": "authorized_user", "client_id": "cid",
                                   "client_secret": "csecret", "refresh_token": "rtoken",
                                   "token_uri": tok.url + "/token"}))
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        r = tool(env, "auth", stocked)
        assert b"auth: authorized_user" in r.stderr
        assert tool(env, "get", stocked, "obj").stdout == b"secret"
        # CLOUDSDK_CONFIG moves the well-known file.
        moved = tmp_path / "gcloud-config"
        moved.mkdir()
        (moved / "application_default_credentials.json").write_text(
            adc.read_text().replace("rtoken", "other"))
        env["CLOUDSDK_CONFIG"] = str(moved)
        r = tool(env, "get", stocked, "obj", check=False)
        assert r.returncode == 3 and b"token request failed" in r.stderr and b"bad client" in r.stderr
    assert tok.log == ["refresh", "refresh", "denied: bad client"]


def test_metadata_server_through_gce_metadata_host(gcs, stocked, tmp_path):
    with TokenServer(token="meta-token") as tok, GateProxy(gcs.url, token="meta-token") as proxy:
        env = clean_env(GCE_METADATA_HOST=f"127.0.0.1:{tok.port}",
                        UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        r = tool(env, "auth", stocked)
        assert b"auth: metadata" in r.stderr
        assert tool(env, "get", stocked, "obj").stdout == b"secret"
    assert tok.log == ["metadata", "metadata"]


def test_anonymous_for_public_buckets(gcs, stocked, tmp_path):
    with GateProxy(gcs.url, token=None) as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        r = tool(env, "auth", stocked)
        assert b"auth: anonymous" in r.stderr
        assert proxy.auth_seen == [""]
    with GateProxy(gcs.url, token="good-token") as proxy:
        env = clean_env(UNROLL_GCS_ENDPOINT=proxy.url, HOME=tmp_path)
        r = tool(env, "get", stocked, "obj", check=False)
        assert r.returncode == 3
        assert b"HTTP 401" in r.stderr and b"Google credentials: anonymous, none were found" in r.stderr


def test_emulator_sends_no_credentials(gcs, stocked, tmp_path):
    with TokenServer() as tok:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        env = clean_env(STORAGE_EMULATOR_HOST=gcs.url, GOOGLE_APPLICATION_CREDENTIALS=sa,
                        HOME=tmp_path)
        r = tool(env, "auth", stocked)
        assert b"auth: emulator" in r.stderr
    assert tok.log == []


def test_unusable_credentials_file(gcs, stocked, tmp_path):
    env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=tmp_path / "missing.json", HOME=tmp_path)
    r = tool(env, "ls", stocked, check=False)
    assert r.returncode == 2 and b"missing.json" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "service_account", "client_email": "x"}')
    env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=bad, HOME=tmp_path)
    r = tool(env, "ls", stocked, check=False)
    assert r.returncode == 2 and b'no string \\"private_key\\"' in r.stderr or \
        b'no string "private_key"' in r.stderr, r.stderr


# ---- the same through unroll itself -----------------------------------------------------

@pytest.mark.parametrize("case", ["good", "stale-token", "wrong-key"])
def test_unroll_ls_with_service_account(unroll_bin, gcs, tmp_path, case):
    gcs.put(BUCKET, "cli/items/_METADATA", b"{}")
    with TokenServer(token="stale-token" if case == "stale-token" else "good-token") as tok:
        sa, pub, email = make_service_account(tmp_path, tok.url + "/token")
        if case == "wrong-key":
            _, pub, _ = make_service_account(tmp_path, tok.url + "/token", name="other.json")
        tok.public_key, tok.email = pub, email
        with GateProxy(gcs.url, token="good-token") as proxy:
            env = clean_env(GOOGLE_APPLICATION_CREDENTIALS=sa, UNROLL_GCS_ENDPOINT=proxy.url,
                            HOME=tmp_path, UNROLL_HTTP_RETRIES=1, UNROLL_HTTP_BACKOFF_MS=5)
            r = subprocess.run([str(unroll_bin), "ls", f"gs://{BUCKET}/cli/items"], env=env,
                               capture_output=True, text=True, timeout=120)
    if case == "good":
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["_METADATA"]
        return
    assert r.returncode == 3, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith("unroll: "), r.stderr
    assert f"service_account from {sa}" in line, line
    if case == "stale-token":
        assert "access denied" in line and "HTTP 401" in line, line
    else:
        assert "token request failed" in line and "Invalid JWT Signature." in line, line
