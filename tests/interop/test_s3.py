"""s3:// in and out against a real S3 server (SeaweedFS, signatures checked), with the same
oracle as test_unroll.py: checkpoints written by real Orbax are put into the bucket by
TensorStore's s3 driver, unroll converts bucket -> local, local -> bucket and bucket -> bucket,
and the output (downloaded by TensorStore) is restored by stock Orbax and compared bit for bit
with the Python reference. Faults come from a proxy in front of the server."""
import os
import pathlib
import subprocess
import uuid

import pytest

import maxtext_fixtures
import reference
import s3_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
BUCKET = "unroll-tests"


s3 = s3_fixtures.server_fixture(BUCKET, scope="session")


@pytest.fixture(scope="session")
def proxy(s3):
    p = s3_fixtures.FaultProxy(s3.port, stall_s=6.0)
    yield p
    p.stop()


_uploaded = {}


def in_bucket(s3, info) -> str:
    """The fixture's checkpoint root copied into the bucket (once per session); returns the
    s3:// location of its item directory."""
    key = (info.kind, info.layout, info.dtype)
    if key not in _uploaded:
        prefix = f"in/{info.kind}-{info.layout}-{info.dtype}/checkpoints"
        assert s3.upload_tree(info.root, BUCKET, prefix) > 0
        _uploaded[key] = f"s3://{BUCKET}/{prefix}/{info.step}/items"
    return _uploaded[key]


def fresh(name: str) -> str:
    return f"s3://{BUCKET}/out/{name}-{uuid.uuid4().hex[:8]}"


def run_unroll(unroll_bin, info, in_path, out_dir, env, *, extra=(), timeout=300):
    cfg = info.config
    use_ocdbt, use_zarr3 = maxtext_fixtures.LAYOUTS[info.layout]
    args = [str(unroll_bin), str(CONFIG), "-q", f"{info.input_key}={in_path}",
            f"base_output_directory={out_dir}", "run_name=run",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"first_num_dense_layers={cfg.get('first_num_dense_layers', 0)}",
            f"param_scan_axis={cfg['param_scan_axis']}", "scan_layers=true",
            "force_unroll=true", f"pure_nnx={str(cfg['pure_nnx']).lower()}",
            f"decoder_block={cfg['decoder_block']}",
            f"checkpoint_storage_use_ocdbt={str(use_ocdbt).lower()}",
            f"checkpoint_storage_use_zarr3={str(use_zarr3).lower()}", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def check_bucket_output(s3, out_url, info, tmp_path):
    """Download <out>/run/checkpoints with TensorStore and restore it with stock Orbax."""
    prefix = out_url[len(f"s3://{BUCKET}/"):] + "/run/checkpoints"
    local = tmp_path / "downloaded" / "checkpoints"
    keys = s3.download_tree(BUCKET, prefix, local)
    assert "0/commit_success.txt" in keys and "0/items/_METADATA" in keys, keys
    reference.check_unrolled(local / "0" / "items", reference.reference_for(info))
    return keys


@pytest.mark.parametrize("layout", tuple(maxtext_fixtures.LAYOUTS))
def test_bucket_to_local_matches_reference(unroll_bin, make_fixture, s3, tmp_path, layout):
    info = make_fixture("linen", layout, "float32")
    res = run_unroll(unroll_bin, info, in_bucket(s3, info), tmp_path, s3.env())
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(tmp_path / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))


@pytest.mark.parametrize("layout", ["ocdbt-zarr3", "plain-zarr2"])
def test_local_to_bucket_matches_reference(unroll_bin, make_fixture, s3, tmp_path, layout):
    info = make_fixture("linen", layout, "bfloat16")
    out = fresh("l2b")
    res = run_unroll(unroll_bin, info, info.items, out, s3.env())
    assert res.returncode == 0, res.stderr
    keys = check_bucket_output(s3, out, info, tmp_path)
    assert keys[-1] == "0/items/manifest.ocdbt" or "ocdbt" not in layout or \
        "0/items/manifest.ocdbt" in keys


def test_bucket_to_bucket_then_verify_and_inspect(unroll_bin, make_fixture, s3, tmp_path):
    info = make_fixture("nnx", "ocdbt-zarr3", "float32")
    src = in_bucket(s3, info)
    out = fresh("b2b")
    env = s3.env()
    res = run_unroll(unroll_bin, info, src, out, env)
    assert res.returncode == 0, res.stderr
    check_bucket_output(s3, out, info, tmp_path)
    items = f"{out}/run/checkpoints/0/items"
    cfg = info.config
    ver = subprocess.run([str(unroll_bin), "verify", src, items, str(CONFIG),
                          f"base_num_decoder_layers={cfg['num_decoder_layers']}",
                          f"param_scan_axis={cfg['param_scan_axis']}",
                          f"pure_nnx={str(cfg['pure_nnx']).lower()}",
                          f"decoder_block={cfg['decoder_block']}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    assert "0 elements differ: OK" in ver.stdout + ver.stderr
    ins = subprocess.run([str(unroll_bin), "inspect", items], capture_output=True, text=True,
                         env=env, timeout=120)
    assert ins.returncode == 0, ins.stderr
    assert "bfloat16" in ins.stdout
    ls = subprocess.run([str(unroll_bin), "ls", "--sizes", items], capture_output=True,
                        text=True, env=env, timeout=120)
    assert ls.returncode == 0, ls.stderr
    assert any(line.endswith("zarr.json") or "zarr.json\t" in line
               for line in ls.stdout.splitlines())


def test_destination_with_objects_is_refused_unless_replace(unroll_bin, make_fixture, s3,
                                                            tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    out = fresh("replace")
    env = s3.env()
    assert run_unroll(unroll_bin, info, info.items, out, env).returncode == 0
    prefix = out[len(f"s3://{BUCKET}/"):] + "/run/checkpoints/0"
    before = s3.list(BUCKET, prefix)
    res = run_unroll(unroll_bin, info, info.items, out, env)
    assert res.returncode == 2
    assert "already holds" in res.stderr and "--replace" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert s3.list(BUCKET, prefix) == before
    res = run_unroll(unroll_bin, info, info.items, out, env, extra=["--replace"])
    assert res.returncode == 0, res.stderr
    check_bucket_output(s3, out, info, tmp_path)


def test_wrong_secret_fails_with_exit_3_and_one_line(unroll_bin, make_fixture, s3, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    src = in_bucket(s3, info)
    res = run_unroll(unroll_bin, info, src, tmp_path,
                     s3.env(AWS_SECRET_ACCESS_KEY="not-the-secret"))
    assert res.returncode == 3, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "403" in lines[0] and "access denied" in lines[0], lines[0]
    assert f"s3://{BUCKET}/" in lines[0]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("_METADATA"))


@pytest.mark.parametrize("url,status", [("gcs://bucket/out", 2), ("ftp://host/out", 2),
                                        ("gs://bucket/out", None)])
def test_foreign_schemes_never_become_local_directories(unroll_bin, make_fixture, tmp_path,
                                                        url, status):
    """Before: base_output_directory=gs://bucket/out created ./gs:/bucket/out and said
    "wrote gs://..."."""
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    res = subprocess.run(
        [str(unroll_bin), str(CONFIG), f"{info.input_key}={info.items}",
         f"base_output_directory={url}", "run_name=run",
         f"base_num_decoder_layers={info.config['num_decoder_layers']}",
         f"param_scan_axis={info.config['param_scan_axis']}",
         f"decoder_block={info.config['decoder_block']}",
         f"pure_nnx={str(info.config['pure_nnx']).lower()}"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={"PATH": "/usr/bin:/bin", "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
             "GCE_METADATA_HOST": "127.0.0.1:9", "UNROLL_HTTP_RETRIES": "0",
             "HOME": str(tmp_path)})
    assert res.returncode != 0
    if status is not None:
        assert res.returncode == status, res.stderr
    assert "wrote" not in res.stderr
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


# ---- faults -------------------------------------------------------------------------------

def _is_object_get(method, path):
    return method == "GET" and "list-type" not in path


@pytest.mark.parametrize("plan", [["503", "503", "429"], ["drop", "drop"], ["stall"]],
                         ids=["503-429", "drop-mid-body", "stall"])
def test_read_faults_are_retried(unroll_bin, make_fixture, s3, proxy, tmp_path, plan):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    src = in_bucket(s3, info)
    proxy.reset(plan, match=_is_object_get)
    res = run_unroll(unroll_bin, info, src, tmp_path, s3.env(endpoint=proxy.endpoint))
    assert res.returncode == 0, res.stderr
    assert len(proxy.faults_done) == len(plan), proxy.faults_done
    reference.check_unrolled(tmp_path / "run" / "checkpoints" / "0" / "items",
                             reference.reference_for(info))


def test_read_faults_past_the_retry_budget_exit_3(unroll_bin, make_fixture, s3, proxy,
                                                   tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    src = in_bucket(s3, info)
    proxy.reset(["503"] * 50, match=_is_object_get)
    res = run_unroll(unroll_bin, info, src, tmp_path,
                     s3.env(endpoint=proxy.endpoint, UNROLL_HTTP_RETRIES="3"))
    assert res.returncode == 3, res.stderr
    line = res.stderr.strip().splitlines()
    assert len(line) == 1 and "HTTP 503" in line[0] and "4 attempts" in line[0], line
    assert not (tmp_path / "run" / "checkpoints" / "0").exists()


def test_upload_failure_leaves_nothing_published(unroll_bin, make_fixture, s3, proxy,
                                                 tmp_path):
    """PUTs fail for good half-way: exit 3, what was written is deleted, no commit marker."""
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    out = fresh("putfail")
    puts = {"n": 0}

    def every_put_after_the_third(method, path):
        if method != "PUT":
            return False
        puts["n"] += 1
        return puts["n"] > 3

    proxy.reset(["503"] * 100, match=every_put_after_the_third)
    res = run_unroll(unroll_bin, info, info.items, out,
                     s3.env(endpoint=proxy.endpoint, UNROLL_HTTP_RETRIES="2"))
    assert res.returncode == 3, res.stderr
    assert "nothing published" in res.stderr and "were deleted" in res.stderr, res.stderr
    prefix = out[len(f"s3://{BUCKET}/"):]
    assert s3.list(BUCKET, prefix) == []


def test_upload_faults_are_retried(unroll_bin, make_fixture, s3, proxy, tmp_path):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    out = fresh("putretry")
    proxy.reset(["503", "429", "503"], match=lambda m, p: m == "PUT")
    res = run_unroll(unroll_bin, info, info.items, out, s3.env(endpoint=proxy.endpoint))
    assert res.returncode == 0, res.stderr
    assert len(proxy.faults_done) == 3
    check_bucket_output(s3, out, info, tmp_path)


# ---- what is downloaded -------------------------------------------------------------------

def _sizes(unroll_bin, items, env):
    res = subprocess.run([str(unroll_bin), "ls", "--sizes", items], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return {k: int(v) for k, v in (line.split("\t") for line in res.stdout.splitlines())}


@pytest.fixture(scope="session")
def adam_checkpoint(fixture_cache):
    """A small MaxText-shaped full state (params + Adam mu/nu, OCDBT + zarr3) from
    bench/make_checkpoint.py: large enough that its values live in data files."""
    import json
    import os
    import shutil
    import sys
    out = fixture_cache / "s3-adam-0.01gib"
    if not (out / "bench_checkpoint.json").is_file():
        tmp = fixture_cache / f"s3-adam-tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_checkpoint.py"), "make",
                        "--params-gib", "0.01", "--out", str(tmp)], check=True,
                       capture_output=True, timeout=600)
        try:
            os.rename(tmp, out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another run made it meanwhile
    meta = json.loads((out / "bench_checkpoint.json").read_text())
    return out / "checkpoints" / str(meta["step"]) / "items", meta


def _gets(proxy):
    return [(p, n) for m, p, r, n in proxy.served if m == "GET" and "list-type" not in p]


def test_dropped_leaves_are_never_downloaded_ocdbt(unroll_bin, s3, proxy, tmp_path,
                                                   adam_checkpoint):
    items, meta = adam_checkpoint
    prefix = "in/adam-0.01gib/checkpoints"
    if not s3.list(BUCKET, prefix):
        s3.upload_tree(items.parent.parent, BUCKET, prefix)
    src = f"s3://{BUCKET}/{prefix}/{meta['step']}/items"
    values = _sizes(unroll_bin, src, s3.env())
    opt = sum(v for k, v in values.items() if k.startswith("opt_state"))
    params = sum(v for k, v in values.items() if k.startswith("params"))
    assert opt > params > 1 << 20  # Adam's mu and nu: twice the parameters
    objects = _object_sizes(s3, src)
    # data files: d/ of the merged database and of the per-process ones (ocdbt.process_0/d/)
    stored = sum(sz for k, sz in objects.items() if ("/" + k).find("/d/") >= 0)
    proxy.reset()
    res = subprocess.run([str(unroll_bin), str(CONFIG), "-q", f"load_full_state_path={src}",
                          f"base_output_directory={tmp_path}", "run_name=run",
                          "force_unroll=true", "scan_layers=true", "pure_nnx=false",
                          f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, timeout=300,
                         env=s3.env(endpoint=proxy.endpoint))
    assert res.returncode == 0, res.stderr
    data = sum(n for p, n in _gets(proxy) if "/d/" in p)
    # the parameters and the B+tree nodes are read, and not one byte of mu or nu: everything
    # downloaded fits in what the data files hold besides the optimizer state
    # (small values sit inline in the zstd-compressed nodes: only the others count below)
    params_out_of_line = sum(v for k, v in values.items() if k.startswith("params") and v > 1024)
    opt_out_of_line = sum(v for k, v in values.items() if k.startswith("opt_state") and v > 1024)
    assert opt_out_of_line > opt * 0.9
    assert params_out_of_line <= data <= stored - opt_out_of_line, (
        params_out_of_line, data, stored, opt_out_of_line)


def test_dropped_leaves_are_never_downloaded_plain(unroll_bin, make_fixture, s3, proxy,
                                                   tmp_path):
    info = make_fixture("linen", "plain-zarr3", "float32")
    src = in_bucket(s3, info)
    proxy.reset()
    res = run_unroll(unroll_bin, info, src, tmp_path, s3.env(endpoint=proxy.endpoint))
    assert res.returncode == 0, res.stderr
    gets = _gets(proxy)
    assert any("/params" in p for p, _ in gets)
    # the dropped leaves' array metadata is read when the checkpoint is opened (as inspect
    # shows every leaf); their chunks never are
    meta_files = ("zarr.json", ".zarray", ".zattrs", ".zgroup")
    chunks = [p for p, _ in gets if "opt_state" in p and not p.endswith(meta_files)]
    assert chunks == []


def _object_sizes(s3, item_url):
    prefix = item_url[len(f"s3://{BUCKET}/"):]
    sizes = {}
    kv = s3._kv(BUCKET, prefix)
    for k in kv.list().result():
        sizes[k.decode()] = len(kv.read(k).result().value)
    return sizes


def test_large_objects_go_up_in_parts(unroll_bin, s3, proxy, tmp_path, adam_checkpoint):
    """An output data file larger than the part size is a multipart upload (initiate, parts,
    complete), and the result reads back equal to the input (unroll verify on the bucket)."""
    items, meta = adam_checkpoint
    out = fresh("multipart")
    proxy.reset()
    env = s3.env(endpoint=proxy.endpoint, UNROLL_S3_PART_BYTES=str(5 << 20))
    res = subprocess.run([str(unroll_bin), str(CONFIG), "-q", f"load_full_state_path={items}",
                          f"base_output_directory={out}", "run_name=run", "force_unroll=true",
                          "scan_layers=true", "pure_nnx=false",
                          f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    posts = [p for m, p, r, n in proxy.served if m == "POST"]
    assert any(p.endswith("?uploads") or "uploads=" in p for p in posts), posts
    assert any("uploadId=" in p for p in posts), posts
    parts = [p for m, p, r, n in proxy.served if m == "PUT" and "partNumber=2" in p]
    assert parts, "no second part"
    ver = subprocess.run([str(unroll_bin), "verify", str(items),
                          f"{out}/run/checkpoints/0/items", str(CONFIG), "pure_nnx=false",
                          f"base_num_decoder_layers={meta['layers']}"],
                         capture_output=True, text=True, env=s3.env(), timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr


def test_unfinished_commit_file_save_in_bucket_is_refused(unroll_bin, make_fixture, s3,
                                                          tmp_path):
    """Orbax's commit-file mode on an object store: the item's marker is there, the step's is
    not yet (the save is still finalizing). unroll must not read it (exit 4) nor write."""
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    prefix = f"in/unfinished-{uuid.uuid4().hex[:8]}/checkpoints"
    s3.upload_tree(info.root, BUCKET, prefix)
    keys = s3.list(BUCKET, prefix)
    step_marker = f"{info.step}/commit_success.txt"
    assert step_marker in keys and f"{info.step}/items/commit_success.txt" in keys
    st, body = s3.request("DELETE", f"/{BUCKET}/{prefix}/{step_marker}")
    assert st in (200, 204), body
    src = f"s3://{BUCKET}/{prefix}/{info.step}/items"
    res = run_unroll(unroll_bin, info, src, tmp_path, s3.env())
    assert res.returncode == 4, res.stderr
    assert "unfinished Orbax save" in res.stderr and "commit_success.txt" in res.stderr
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("_METADATA"))


@pytest.fixture(scope="session")
def shards_checkpoint(fixture_cache):
    """A MaxText-shaped full state whose parameter chunks are device shards of about 6 MB (16
    of them per MLP kernel): a bucket input that 16 workers once held 16 at a time."""
    import json
    import os
    import shutil
    import sys
    out = fixture_cache / "s3-shards-0.2gib"
    if not (out / "bench_checkpoint.json").is_file():
        tmp = fixture_cache / f"s3-shards-tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_checkpoint.py"), "make",
                        "--params-gib", "0.2", "--out", str(tmp)], check=True,
                       capture_output=True, timeout=600)
        try:
            os.rename(tmp, out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another run made it meanwhile
    return out, json.loads((out / "bench_checkpoint.json").read_text())


def _peak_rss(args, env, tmp_path):
    """Exit status, stderr and peak RSS (bytes) of one run, measured by GNU time."""
    report = tmp_path / f"time-{uuid.uuid4().hex[:8]}.txt"
    res = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(report), *args],
                         capture_output=True, text=True, env=env, timeout=600)
    return res.returncode, res.stderr, int(report.read_text().split()[-1]) * 1024


def test_bucket_input_holds_what_a_local_input_holds(unroll_bin, s3, tmp_path,
                                                     shards_checkpoint):
    """From s3:// the conversion holds what it holds from local files, plus at most its
    read-ahead (a quarter of the memory limit, 64 MiB by default), whatever the size of the
    chunks; and it writes the same bytes. (With 16 workers for a bucket input, as before,
    16 chunks and their outputs were held at once.)"""
    root, meta = shards_checkpoint
    step = meta["step"]
    prefix = f"in/shards-{uuid.uuid4().hex[:8]}/checkpoints"
    assert s3.upload_tree(root / "checkpoints", BUCKET, prefix) > 0
    common = [str(CONFIG), "-q", "force_unroll=true", "scan_layers=true", "pure_nnx=false",
              f"base_num_decoder_layers={meta['layers']}", "run_name=run"]
    env = {**s3.env(), "SOURCE_DATE_EPOCH": "1700000000"}  # the same recorded times
    if "__asan_init" in pathlib.Path(unroll_bin).read_bytes().decode("latin-1"):
        # the sanitizer gate's binary: freed blocks wait in ASan's quarantine (256 MiB by
        # default), which a bucket input's many response buffers fill; without it the
        # allocator gives memory back as the plain build does
        env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") +
                               ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0")
    runs = {}
    for name, items in (("local", root / "checkpoints" / str(step) / "items"),
                        ("bucket", f"s3://{BUCKET}/{prefix}/{step}/items")):
        out = tmp_path / name
        rc, err, rss = _peak_rss([str(unroll_bin), *common, f"load_full_state_path={items}",
                                  f"base_output_directory={out}"], env, tmp_path)
        assert rc == 0, err
        runs[name] = (out / "run" / "checkpoints" / "0" / "items", rss)
    (local, local_rss), (bucket, bucket_rss) = runs["local"], runs["bucket"]
    print(f"peak RSS: local input {local_rss >> 20} MiB, s3:// input {bucket_rss >> 20} MiB")
    # the read-ahead's budget, and a stored chunk per worker read into memory (a local one is
    # mapped) with the HTTP threads' buffers
    assert bucket_rss <= local_rss + (64 << 20) + (48 << 20), (
        f"s3:// input held {bucket_rss >> 20} MiB, the local one {local_rss >> 20} MiB")
    files = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(bucket) for p in bucket.rglob("*") if p.is_file())
    for f in files:
        if f.name != "commit_success.txt":  # names where it was committed
            assert (local / f).read_bytes() == (bucket / f).read_bytes(), f
