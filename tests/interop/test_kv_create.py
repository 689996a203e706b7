"""The kvstore's conditional create (ur_kvstore_create: "create this key only if absent")
against a real S3 server (SeaweedFS, If-None-Match: * on PUT) and through the GCS driver,
driven by the test tool tests/unit/gcs/gcs_tool (it opens any location). The claim of a
multi-process run rests on it: of several processes creating one object at once, exactly one
must be told it created it."""
import concurrent.futures
import pathlib
import subprocess
import uuid

import pytest

import s3_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "unroll-create"


def kv_tool() -> pathlib.Path:
    import os
    b = pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))
    path = b / "tests" / "unit" / "gcs" / "gcs_tool"
    if not path.exists():
        pytest.fail(f"gcs_tool not built at {path}")
    return path


def tool(env, *args, check=True):
    r = subprocess.run([str(kv_tool()), *map(str, args)], env=env, capture_output=True,
                       timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"gcs_tool {args} exited {r.returncode}: {r.stderr.decode()}")
    return r


s3 = s3_fixtures.server_fixture(BUCKET)


def test_s3_server_honours_if_none_match(s3):
    """The server itself answers 412 to a PUT with If-None-Match: * of an existing object
    (else the driver's create would silently overwrite)."""
    key = f"/{BUCKET}/raw-{uuid.uuid4().hex[:8]}"
    import http.client
    for body, want in ((b"first", 200), (b"second", 412)):
        h = s3_fixtures.sigv4_headers("PUT", s3.endpoint + key, body)
        h["If-None-Match"] = "*"
        c = http.client.HTTPConnection("127.0.0.1", s3.port, timeout=30)
        c.request("PUT", key, body=body, headers=h)
        st = c.getresponse().status
        c.close()
        assert st == want, (body, st)
    st, got = s3.request("GET", key)
    assert (st, got) == (200, b"first")


def test_s3_create_then_exists(s3, tmp_path):
    src = tmp_path / "v"
    src.write_bytes(b"first")
    env = s3.env()
    url = f"s3://{BUCKET}/c-{uuid.uuid4().hex[:8]}"
    assert tool(env, "create", url, "run/finish.claim", src).stdout == b"created\n"
    src.write_bytes(b"second")
    assert tool(env, "create", url, "run/finish.claim", src).stdout == b"exists\n"
    assert tool(env, "get", url, "run/finish.claim").stdout == b"first"
    # an ordinary write still overwrites, and a deleted key can be created again
    tool(env, "rm", url, "run/finish.claim")
    assert tool(env, "create", url, "run/finish.claim", src).stdout == b"created\n"
    assert tool(env, "get", url, "run/finish.claim").stdout == b"second"


def test_s3_create_race(s3, tmp_path):
    """Eight processes create one object at once: exactly one creates it, and the object holds
    that one's value."""
    env = s3.env()
    url = f"s3://{BUCKET}/race-{uuid.uuid4().hex[:8]}"
    srcs = []
    for i in range(8):
        p = tmp_path / f"v{i}"
        p.write_bytes(f"process {i}".encode())
        srcs.append(p)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda p: tool(env, "create", url, "claim", p).stdout, srcs))
    assert sorted(outs) == [b"created\n"] + [b"exists\n"] * 7, outs
    winner = outs.index(b"created\n")
    assert tool(env, "get", url, "claim").stdout == f"process {winner}".encode()


def test_file_create_through_the_tool(tmp_path):
    """The same command on a local directory (the file store's O_EXCL create)."""
    src = tmp_path / "v"
    src.write_bytes(b"x")
    root = tmp_path / "store"
    assert tool({}, "create", root, "a/claim", src).stdout == b"created\n"
    assert tool({}, "create", root, "a/claim", src).stdout == b"exists\n"


def test_s3_one_level_listing(s3, tmp_path):
    """ur_kvstore_list_dir on S3: ListObjectsV2 with delimiter=/, the values one level down
    and each CommonPrefix once as a directory; nothing under the prefix is exit 6."""
    env = s3.env()
    url = f"s3://{BUCKET}/lsdir-{uuid.uuid4().hex[:8]}"
    src = tmp_path / "v"
    src.write_bytes(b"v")
    for key in ("a/x", "a/y/z", "a/y/w", "a/yy", "b", "c/d/e"):
        tool(env, "put", url, key, src)
    assert tool(env, "lsdir", url).stdout.decode().splitlines() == ["a/", "b", "c/"]
    assert tool(env, "lsdir", url, "a/").stdout.decode().splitlines() == ["x", "y/", "yy"]
    assert tool(env, "lsdir", url, "c/d/").stdout.decode().splitlines() == ["e"]
    assert tool(env, "lsdir", url, "q/", check=False).returncode == 6
