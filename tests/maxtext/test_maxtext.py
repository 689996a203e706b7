"""The released maxtext package in the loop: per family, a tiny model trained 2 steps by real
MaxText, converted by unroll, checked against MaxText's own `scan_layers=false` model tree and
decoded by MaxText's inference engine (driver.py does the work in a subprocess per family);
the non-parameter variables MaxText runs with (DeepSeek's router bias) are the trained ones;
where MaxText's own converter is right (driver.MAXTEXT_VALID) unroll's output equals its output
bit for bit; other storage formats (driver.VARIANTS) decode the same.

Run by the Python 3.12 venv .venv-maxtext (scripts/setup.sh --tests), with UNROLL_BIN set;
scripts/test.sh runs it. Tolerance: the unrolled model runs the same bf16 values through the
same float32 ops as the scanned one, only not inside a scan; tokens must be equal and logits
within LOGITS_ATOL (0 observed on llama2; XLA may fuse the two graphs differently).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
import driver  # noqa: E402

LOGITS_ATOL = 1e-4


@pytest.fixture(scope="session", autouse=True)
def _environment():
    # Missing pieces fail the suite (never a skip): CI must notice.
    bin_ = os.environ.get("UNROLL_BIN")
    assert bin_ and os.access(bin_, os.X_OK), "UNROLL_BIN must name the built unroll binary"
    assert sys.version_info[:2] == (3, 12), "tests/maxtext runs in .venv-maxtext (Python 3.12)"


def _facts(family: str, tmp_path: pathlib.Path) -> dict:
    p = subprocess.run([sys.executable, str(HERE / "driver.py"), family, str(tmp_path)],
                       capture_output=True, text=True)
    facts_file = tmp_path / "facts.json"
    if p.returncode != 0 or not facts_file.exists():
        pytest.fail(f"driver {family} failed (rc {p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(facts_file.read_text())


@pytest.mark.parametrize("family", sorted(driver.FAMILIES))
def test_family(family, tmp_path):
    f = _facts(family, tmp_path)
    assert f["unrolled"]["rc"] == 0, f["unrolled"]["stderr"]
    assert f["scanned"]["rc"] == 0, f["scanned"]["stderr"]
    assert f["verify"]["rc"] == 0, f["verify"]["stdout"] + f["verify"]["stderr"]
    # the unscanned output is exactly the tree MaxText's scan_layers=false model restores
    model, out = f["model_tree"], f["unrolled_tree"]
    assert sorted(set(model) - set(out)) == [], "leaves the model needs, missing from unroll's output"
    assert sorted(set(out) - set(model)) == [], "leaves in unroll's output the model does not have"
    assert {k: v for k, v in out.items() if model[k] != v} == {}
    # same tokens, same logits, from the unscanned output as from the scanned one
    du, ds = f["decode_unrolled"], f["decode_scanned"]
    assert du["tokens"] == ds["tokens"]
    a, b = np.asarray(du["logits"]), np.asarray(ds["logits"])
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=0, atol=LOGITS_ATOL)
    # the parallel runs really are: arrays sharded over the mesh axes they name
    if family == "pipeline":
        assert f["mesh_axes_used"].get("stage", 0) > 0, f["mesh_axes_used"]
    if family == "fsdp-tensor":
        assert f["mesh_axes_used"].get("fsdp", 0) > 0 and f["mesh_axes_used"].get("tensor", 0) > 0, \
            f["mesh_axes_used"]
    # non-parameter variables (DeepSeek's router bias): MaxText runs with the trained values
    _check_aux(family, f)
    # other storage formats of the same output: what MaxText restores and decodes alike
    for name, v in f["variants"].items():
        assert v["rc"] == 0, v["stderr"]
        if name == "zarr2-no-ocdbt":
            assert v["storage"] == {"ocdbt": False, "zarr2": True, "zarr3": False}
        assert v["tree"] == model
        assert v["decode"]["tokens"] == ds["tokens"]
        np.testing.assert_allclose(np.asarray(v["decode"]["logits"]), b, rtol=0, atol=LOGITS_ATOL)
    # where MaxText's own converter is right, unroll writes the same leaves, bit for bit
    if family in driver.MAXTEXT_VALID:
        assert f["maxtext"]["rc"] == 0, f["maxtext"]["stderr"]
        assert f["maxtext"]["differences"] == {}
        assert f["maxtext"]["leaves_compared"] == len(model)


def _unstacked(trained: dict, model: dict, family: str) -> dict:
    """The trained non-parameter variables as the unscanned model holds them: a leaf of scanned
    group decoder/<g> (stacked on axis 0) becomes decoder/<g>_<i>, one row each; deepseek4's
    decoder/scanned_blocks/layers_<j> (blocks of 2 after the hash layers) decoder/layers_<h+2b+j>."""
    out = {}
    hash_layers = [int(a.split("=")[1]) for a in driver.ALL[family]
                   if a.startswith("first_num_hash_layers=")]
    for k, v in trained.items():
        p = k.split("/")
        if len(p) > 3 and p[:2] == ["decoder", "scanned_blocks"] and hash_layers:
            j = int(p[2].split("_")[1])
            for b, row in enumerate(v):
                out["/".join(["decoder", f"layers_{hash_layers[0] + 2 * b + j}", *p[3:]])] = row
        elif len(p) > 2 and p[0] == "decoder" and any(m.startswith(f"decoder/{p[1]}_0/") for m in model):
            for i, row in enumerate(v):
                out["/".join(["decoder", f"{p[1]}_{i}", *p[2:]])] = row
        else:
            out[k] = v
    return out


def _check_aux(family: str, f: dict) -> None:
    trained = f["trained_aux"]
    for key in driver.EDITS.get(family, []):
        k = key.split("/", 2)[2]
        assert np.any(np.asarray(trained[k]) != 0), \
            f"{k} must be non-zero to tell a loaded value from an initialised one"
    assert f["decode_scanned"]["aux"] == trained
    assert f["decode_unrolled"]["aux"] == _unstacked(trained, f["model_tree"], family)

