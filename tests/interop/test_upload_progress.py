"""The upload to an object store has a progress line of its own, in the style of the
conversion's (tests/cli/test_habits.py): "upload: <percent>  <done> / <total> GiB", on a
terminal only, never with -q, ending at 100.0% before the summary."""
import os
import pty
import re
import subprocess
import uuid

import pytest

import s3_fixtures
from test_s3 import CONFIG, adam_checkpoint  # noqa: F401 (a fixture)

BUCKET = "unroll-progress"


s3 = s3_fixtures.server_fixture(BUCKET)


def args(unroll_bin, info, out, *extra):
    cfg = info.config
    return [str(unroll_bin), str(CONFIG), f"{info.input_key}={info.items}",
            f"base_output_directory={out}", "run_name=run",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"param_scan_axis={cfg['param_scan_axis']}", "scan_layers=true",
            "force_unroll=true", f"pure_nnx={str(cfg['pure_nnx']).lower()}",
            f"decoder_block={cfg['decoder_block']}", *extra]


def run_on_pty(argv, env) -> tuple[int, str]:
    """Run with a pseudo-terminal as stderr; returns (status, what it wrote there)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=slave, env=env,
                              timeout=300)
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return proc.returncode, b"".join(chunks).decode()


def fresh():
    return f"s3://{BUCKET}/out-{uuid.uuid4().hex[:8]}"


def test_upload_progress_on_a_terminal(unroll_bin, make_fixture, s3):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    status, text = run_on_pty(args(unroll_bin, info, fresh()), s3.env())
    assert status == 0, text
    updates = [u for u in re.split(r"[\r\n]+", text) if "%" in u]
    upload = [u for u in updates if u.startswith("upload:")]
    assert upload, text
    assert re.match(r"upload: +\d+\.\d%  \d+\.\d\d / \d+\.\d\d GiB", upload[0]), upload[0]
    assert "100.0%" in upload[-1], upload
    # the conversion's line comes first, the upload's after it, the summary last
    first_upload = updates.index(upload[0])
    assert all(not u.startswith("upload:") for u in updates[:first_upload])
    assert any("%" in u and not u.startswith("upload:") for u in updates[:first_upload]), text
    assert text.rstrip().splitlines()[-1].startswith("unroll: wrote s3://"), text
    percents = [float(re.search(r"(\d+\.\d)%", u).group(1)) for u in upload]
    assert percents == sorted(percents), percents


def test_no_upload_progress_when_quiet_or_not_a_terminal(unroll_bin, make_fixture, s3):
    info = make_fixture("linen", "ocdbt-zarr3", "float32")
    status, text = run_on_pty(args(unroll_bin, info, fresh(), "-q"), s3.env())
    assert status == 0, text
    assert text == "", text
    res = subprocess.run(args(unroll_bin, info, fresh()), capture_output=True, text=True,
                         env=s3.env(), timeout=300)
    assert res.returncode == 0, res.stderr
    assert "upload" not in res.stderr and "%" not in res.stderr, res.stderr
    assert res.stderr.startswith("unroll: wrote s3://"), res.stderr


def test_upload_progress_moves_within_a_large_object(unroll_bin, s3, adam_checkpoint):  # noqa: F811
    """An object uploaded in parts moves the line part by part, not only when it is complete:
    the output's one data file is ~99 % of its bytes and goes up in two 5 MiB parts; the
    proxy holds the first part's answer for a second, so the line printed when that part is
    stored shows up (the line is refreshed at most every 0.2 s) and must read well below
    99 %."""
    items, meta = adam_checkpoint
    proxy = s3_fixtures.FaultProxy(s3.port, stall_s=1.0)
    try:
        proxy.reset(plan=["slow"], match=lambda m, p: m == "PUT" and "partNumber=1&" in p)
        env = s3.env(endpoint=proxy.endpoint, UNROLL_S3_PART_BYTES=str(5 << 20))
        argv = [str(unroll_bin), str(CONFIG), f"load_full_state_path={items}",
                f"base_output_directory={fresh()}", "run_name=run", "force_unroll=true",
                "scan_layers=true", "pure_nnx=false", f"base_num_decoder_layers={meta['layers']}"]
        status, text = run_on_pty(argv, env)
    finally:
        proxy.stop()
    assert status == 0, text
    assert proxy.faults_done, "the first part was never slowed"
    upload = [u for u in re.split(r"[\r\n]+", text) if u.startswith("upload:")]
    percents = [float(re.search(r"(\d+\.\d)%", u).group(1)) for u in upload]
    assert percents and percents[-1] == 100.0, upload
    assert any(40.0 < p < 95.0 for p in percents), upload
