"""Command-line habits: attached option values (`-j2`, `--threads=2`) on every subcommand,
sizes that overflow, what --help and --version list, and a progress line that shows no
rate or ETA before they mean something."""
import os
import pathlib
import pty
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("UNROLL_BIN", ROOT / "build" / "src" / "cli" / "unroll")).resolve()
EXAMPLE = ROOT / "tests" / "data" / "example"
CONFIG = EXAMPLE / "unroll.yml"
ITEMS = EXAMPLE / "checkpoints" / "9" / "items"


def run(*args, **kw):
    if not BIN.is_file():
        pytest.fail(f"unroll binary not found at {BIN}")
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kw)


def convert_args(out, run_name="r"):
    return [CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={out}",
            f"run_name={run_name}", "force_unroll=true"]


def test_help_lists_every_subcommand_and_exit_status():
    res = run("--help")
    assert res.returncode == 0
    for sub in ("verify", "inspect", "ls"):
        assert re.search(rf"^\s+unroll {sub} ", res.stdout, re.M), sub
        assert re.search(rf"^  {sub}\s", res.stdout, re.M), sub
    listed = re.findall(r"^  ([0-9])  \S", res.stdout, re.M)
    assert listed == [str(i) for i in range(7)], res.stdout


@pytest.mark.parametrize("sub", ["verify", "inspect", "ls", "merge", "to_huggingface"])
def test_every_subcommand_help_prints_its_usage(sub):
    """`unroll <sub> --help`: its usage on stdout, exit 0 (inspect's was a usage error)."""
    res = run(sub, "--help")
    assert res.returncode == 0, res.stderr
    assert "usage: unroll " + sub in res.stdout, res.stdout


@pytest.mark.parametrize("url", ["mem://bucket/x", "ftp://host/x"])
def test_a_scheme_the_binary_does_not_serve_is_a_usage_error(url):
    """The README's promise: any scheme but s3:// and gs:// is exit 2, one line naming it;
    mem:// (the tests' in-process store) included: no command line ever made one."""
    for args in (["inspect", url], ["ls", url]):
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert "unsupported URL scheme" in res.stderr and res.stderr.count("\n") == 1


def test_version_names_the_libraries():
    res = run("--version")
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"unroll \d+\.\d+\.\d+", lines[0])
    libs = dict(line.split(" ", 1) for line in lines[1:])
    assert set(libs) == {"zstd", "cJSON", "libyaml", "zlib", "libcurl"}
    curl = libs.pop("libcurl")
    # libcurl also names the TLS library it was built with (object stores sign with it)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?\S* \((OpenSSL|none)\S*\)", curl), curl
    for name, version in libs.items():
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", version), (name, version)


@pytest.mark.parametrize("opts", [["-j2"], ["--threads=2"], ["-j", "2"], ["--threads", "2"],
                                  ["--memory-limit=512M"], ["--memory-limit", "512M"],
                                  ["-j1", "--memory-limit=1G"]])
def test_attached_and_separate_values_are_the_same(tmp_path, opts):
    res = run(*opts, "-n", *convert_args(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "split" in res.stdout


def test_attached_threads_convert_identically(tmp_path):
    a = run("-j2", "-q", *convert_args(tmp_path, "a"))
    b = run("--threads=1", "-q", *convert_args(tmp_path, "b"))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ha = run("inspect", "--hash", tmp_path / "a" / "checkpoints" / "0" / "items")
    hb = run("inspect", "--hash", tmp_path / "b" / "checkpoints" / "0" / "items")
    assert ha.returncode == 0 and hb.returncode == 0
    # the first line names the checkpoint's path; the hashes follow
    assert ha.stdout.split("\n", 1)[1] == hb.stdout.split("\n", 1)[1]
    assert "fnv1a64:" in ha.stdout


@pytest.mark.parametrize("opts,words", [
    (["-j0"], ["-j", "'0'"]),
    (["--threads="], ["--threads", "''"]),
    (["--threads=x"], ["'x'"]),
    (["-j99999999999999999999"], ["thread count"]),
    (["--memory-limit=17179869185G"], ["17179869185G"]),
    (["--memory-limit", "17179869185G"], ["17179869185G"]),
    (["--memory-limit=18446744073709551616"], ["--memory-limit"]),
    (["--memory-limit=-1G"], ["-1G"]),
    (["--memory-limit= 1G"], ["--memory-limit"]),
    (["--memory-limit=0"], ["--memory-limit"]),
    (["--memory-limit"], ["--memory-limit"]),
    (["--dry-run=1"], ["--dry-run=1"]),
])
def test_bad_values_are_refused(tmp_path, opts, words):
    res = run(*opts, *convert_args(tmp_path)) if opts != ["--memory-limit"] else run(*opts)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("unroll: "), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not (tmp_path / "r").exists()


def test_largest_memory_limit_that_fits_is_accepted(tmp_path):
    res = run("--memory-limit=17179869183G", "-n", *convert_args(tmp_path))
    assert res.returncode == 0, res.stderr


def test_verify_and_ls_take_attached_values(tmp_path):
    assert run("-q", *convert_args(tmp_path)).returncode == 0
    out = tmp_path / "r" / "checkpoints" / "0" / "items"
    for opts in (["-m5"], ["--max-issues=5"], ["-m", "5"]):
        res = run("verify", *opts, ITEMS, out)
        assert res.returncode == 0, (opts, res.stderr)
    res = run("verify", "-m0", ITEMS, out)
    assert res.returncode == 2 and "-m0" in res.stderr
    key = "step/zarr.json"
    a = run("ls", f"--cat={key}", ITEMS)
    b = run("ls", "--cat", key, ITEMS)
    assert a.returncode == 0 and a.stdout == b.stdout and '"zarr_format"' in a.stdout
    res = run("ls", "--cat=", ITEMS)
    assert res.returncode != 0


def test_progress_shows_no_eta_before_a_rate_is_known(tmp_path):
    """Progress goes to a terminal only: give the run a pseudo-terminal as stderr. The example
    converts in well under the seconds a rate needs, so no line may carry a rate or an ETA."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([str(BIN), *map(str, convert_args(tmp_path))],
                              stdout=subprocess.PIPE, stderr=slave, timeout=120)
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
    text = b"".join(chunks).decode()
    assert proc.returncode == 0, text
    updates = [u for u in re.split(r"[\r\n]+", text) if "%" in u]
    assert updates, text
    assert "100.0%" in updates[-1]
    for u in updates:
        assert "ETA" not in u and "MiB/s" not in u, u
