"""The newest orbax-checkpoint (tests/interop/requirements-orbax-newest.txt, 0.12.8) beside the
pinned one (0.12.4): MaxText's full training state saved by it in every style it writes
(orbax_newest.py: the item named `items`, `state` or `default`, the v1 API, replica-parallel
separate folders, a controller's named OCDBT process, B-tree nodes apart from the values),
converted by `unroll`, the output restored by the pinned Orbax and by the newest one and
compared bit for bit with the reference (take + astype(bfloat16)), and `unroll verify` run.

The newest package is installed by scripts/setup.sh --tests into .venv/orbax-newest
(UNROLL_ORBAX_NEWEST overrides); without it the tests fail, they never skip."""
import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

import maxtext_fixtures as mf
import orbax_newest
import reference
import test_unroll

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REQ = HERE / "requirements-orbax-newest.txt"
PYTHON = os.environ.get("UNROLL_PYTHON", sys.executable)
NEWEST = REQ.read_text().split("orbax-checkpoint==")[1].split()[0]


def newest_env() -> dict:
    site = pathlib.Path(os.environ.get("UNROLL_ORBAX_NEWEST", ROOT / ".venv" / "orbax-newest"))
    if not (site / "orbax" / "checkpoint").is_dir():
        pytest.fail(f"orbax-checkpoint {NEWEST} not installed at {site}: run "
                    "scripts/setup.sh --tests")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(HERE)])
    return env


def run_newest(*args) -> str:
    res = subprocess.run([PYTHON, str(HERE / "orbax_newest.py"), *map(str, args)],
                         capture_output=True, text=True, env=newest_env(), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


@pytest.fixture(scope="module")
def saved(fixture_cache) -> dict:
    """{"orbax": version, "step": n, "items": {style: item dir}}, written once per generator
    version into the fixture cache (a temporary directory renamed into place)."""
    key = hashlib.sha256(b"".join(p.read_bytes() for p in (
        HERE / "orbax_newest.py", HERE / "maxtext_fixtures.py", REQ))).hexdigest()[:12]
    final = fixture_cache / f"orbax-newest-{key}"
    if not (final / "styles.json").is_file():
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=fixture_cache))
        try:
            run_newest("write", tmp / "x")
            os.rename(tmp / "x", final)
        except OSError:
            if not (final / "styles.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    # the paths inside are absolute under the name it was written as: re-root them
    made = json.loads((final / "styles.json").read_text())
    made["items"] = {s: final / pathlib.Path(p).relative_to(pathlib.Path(p).parents[2])
                     for s, p in made["items"].items()}
    return made


@pytest.fixture(scope="module")
def linen() -> mf.FixtureInfo:
    return mf.describe("linen", mf.DEFAULT_LAYOUT, "float32")


@pytest.fixture(scope="module")
def expected(saved, linen) -> dict:
    """The reference output, from the `items` style input restored by the pinned Orbax."""
    return reference.reference_unroll(saved["items"]["items"],
                                      num_decoder_layers=linen.num_decoder_layers,
                                      param_scan_axis=linen.param_scan_axis, pure_nnx=False)


def convert(unroll_bin, linen, items, out_dir):
    info = dataclasses.replace(linen, config={**linen.config, linen.input_key: str(items)})
    res = test_unroll.run_unroll(unroll_bin, info, out_dir)
    assert res.returncode == 0, res.stderr
    return test_unroll.checkpoint_dir(out_dir) / "0" / "items"


def test_the_writer_is_the_newest_orbax_and_each_style_is_what_it_claims(saved):
    items = saved["items"]
    assert saved["orbax"] == NEWEST
    assert set(items) == set(orbax_newest.STYLES)
    assert items["state"].name == "state" and items["default"].name == "default"
    assert (items["v1"].parent / "orbax.checkpoint").is_file()
    assert (items["replica"] / "ocdbt.process_replica_0" / "manifest.ocdbt").is_file()
    assert (items["controller"] / "ocdbt.process_ctl7" / "manifest.ocdbt").is_file()
    assert list((items["split"] / "ocdbt.process_0" / "ocdbt_meta").iterdir())
    assert not (items["split"] / "ocdbt.process_0" / "d").exists()


@pytest.mark.parametrize("style", orbax_newest.STYLES)
def test_newest_orbax_save_converts_bit_for_bit(unroll_bin, saved, linen, expected, tmp_path,
                                                style):
    src = saved["items"][style]
    out = convert(unroll_bin, linen, src, tmp_path)
    reference.check_unrolled(out, expected)  # the pinned Orbax restores it, three ways
    v = subprocess.run([str(unroll_bin), "verify", str(src), str(out), str(test_unroll.CONFIG),
                        f"base_num_decoder_layers={linen.num_decoder_layers}",
                        f"param_scan_axis={linen.param_scan_axis}", "pure_nnx=false",
                        f"decoder_block={linen.config['decoder_block']}"],
                       capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "0 elements differ: OK" in v.stdout


def test_newest_orbax_restores_the_output(unroll_bin, saved, linen, expected, tmp_path):
    """Every style's conversion restored by the newest Orbax equals the reference."""
    outs = {s: convert(unroll_bin, linen, saved["items"][s], tmp_path / s)
            for s in ("items", "v1", "split")}
    listing = tmp_path / "outputs.json"
    listing.write_text(json.dumps({s: str(p) for s, p in outs.items()}))
    got = json.loads(run_newest("read", listing))
    assert got.pop("orbax") == NEWEST
    want = orbax_newest.digests(expected)
    assert len(want) > 20
    for style, digests in got.items():
        assert digests == want, style
