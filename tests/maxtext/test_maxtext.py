"""The released maxtext package in the loop: per family, a tiny model trained 2 steps by real
MaxText, converted by unroll, checked against MaxText's own `scan_layers=false` model tree and
decoded by MaxText's inference engine (driver.py does the work in a subprocess per family).

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
