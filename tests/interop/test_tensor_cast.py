"""The C cast to bfloat16 (ur_tensor_copy through tests/unit/tensor/tensor_cast_tool) against
JAX's `x.astype(jnp.bfloat16)`, bit for bit: all 2^16 float16 patterns, ~1e6 random float32
patterns plus every special class, a sample of float64 patterns, and all 256 patterns of
each float8 format.

JAX runs on CPU in its default configuration (jax_enable_x64 off, forced here even when
another module enabled it): float64 input becomes float32 before astype, which is what unroll
matches (see include/unroll/tensor.h). The direct
float64 -> bfloat16 rounding of ml_dtypes is checked to differ only on double-rounding ties.

The tool is found at $UNROLL_BUILD_DIR/tests/unit/tensor/tensor_cast_tool (default: build/).
"""
import os
import pathlib
import subprocess
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3fnuz",
          "float8_e4m3b11fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")


@pytest.fixture(scope="module")
def cast_tool() -> pathlib.Path:
    build = pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))
    path = build / "tests" / "unit" / "tensor" / "tensor_cast_tool"
    if not path.is_file():
        pytest.fail(f"tensor_cast_tool not found at {path}: build the tests first")
    return path


def c_cast(tool: pathlib.Path, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    name = {np.dtype(np.float16): "float16", np.dtype(np.float32): "float32",
            np.dtype(np.float64): "float64", np.dtype(ml_dtypes.bfloat16): "bfloat16",
            **{np.dtype(getattr(ml_dtypes, f)): f for f in FLOAT8}}[x.dtype]
    out = subprocess.run([str(tool), name], input=x.tobytes(), capture_output=True, check=True)
    got = np.frombuffer(out.stdout, dtype=np.uint16)
    assert got.size == x.size
    return got


def jax_cast(x: np.ndarray) -> np.ndarray:
    # JAX's default configuration, also when another test module turned x64 on for the session
    # (with x64, XLA:CPU flushes float32-subnormal results of float64 input to zero).
    with jax.default_device(jax.devices("cpu")[0]), jax.enable_x64(False), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "float64 requested, float32 used" without x64
        y = jnp.asarray(x).astype(jnp.bfloat16)
    return np.asarray(y).view(np.uint16).reshape(-1)


def assert_same_bits(src_bits: np.ndarray, got: np.ndarray, want: np.ndarray) -> None:
    bad = np.nonzero(got != want)[0]
    if bad.size:
        rows = [f"src 0x{int(src_bits[i]):x}: C 0x{int(got[i]):04x} JAX 0x{int(want[i]):04x}"
                for i in bad[:10]]
        pytest.fail(f"{bad.size} of {got.size} differ:\n" + "\n".join(rows))


def special_f32_bits() -> np.ndarray:
    exps = np.array([0x00, 0x01, 0x7e, 0x7f, 0x80, 0xfe, 0xff], dtype=np.uint32)
    mants = np.array([0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x10000, 0x18000, 0x400000,
                      0x7f8000, 0x7f7fff, 0x7fffff, 0x3fffff, 0x408000], dtype=np.uint32)
    sign = np.array([0, 0x80000000], dtype=np.uint32)
    b = (sign[:, None, None] | (exps[None, :, None] << 23) | mants[None, None, :]).reshape(-1)
    # Every high half with the rounding-relevant low halves.
    hi = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = np.array([0, 1, 0x7fff, 0x8000, 0x8001, 0xffff], dtype=np.uint32)
    return np.concatenate([b, (hi[:, None] | lows[None, :]).reshape(-1)])


def test_float16_all_patterns(cast_tool):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16)
    assert_same_bits(bits, c_cast(cast_tool, x), jax_cast(x))


def test_float32_random_and_special(cast_tool):
    rng = np.random.default_rng(20240805)
    bits = np.concatenate([special_f32_bits(),
                           rng.integers(0, 1 << 32, size=1_000_000, dtype=np.uint64)
                           .astype(np.uint32)])
    x = bits.view(np.float32)
    want = jax_cast(x)
    assert_same_bits(bits, c_cast(cast_tool, x), want)
    # NaNs of either sign and any payload become the quiet NaN of that sign.
    nan = np.isnan(x)
    assert nan.sum() > 1000
    assert set(np.unique(want[nan]).tolist()) == {0x7fc0, 0xffc0}


def test_float64_sample(cast_tool):
    rng = np.random.default_rng(7)
    n = 300_000
    raw = rng.integers(0, 1 << 63, size=n, dtype=np.uint64)
    sign = rng.integers(0, 2, size=n, dtype=np.uint64) << np.uint64(63)
    # Exponents around float32's range (subnormals, overflow) for most, any for the rest.
    e = rng.integers(1023 - 160, 1023 + 140, size=n).astype(np.uint64)
    bits = np.where(np.arange(n) % 4 == 0, raw | sign,
                    (raw & np.uint64(0x000FFFFFFFFFFFFF)) | (e << np.uint64(52)) | sign)
    specials = np.array([0, 1 << 63, 0x7FF0000000000000, 0xFFF0000000000000,
                         0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001,
                         0xFFF0000000000001, 0x7FFFFFFFFFFFFFFF, 0x7FF4000000000000,
                         0x0000000000000001, 0x47EFFFFFE0000000, 0x47EFFFFFF0000000],
                        dtype=np.uint64)
    # Values whose float32 rounding lands on a bfloat16 tie: 1 + 2^-8 + tiny.
    ties = (np.float64(1.0) + 2.0 ** -8 + rng.integers(1, 1 << 20, size=1000) * 2.0 ** -52)
    bits = np.concatenate([bits, specials, ties.view(np.uint64)])
    x = bits.view(np.float64)
    got = c_cast(cast_tool, x)
    assert_same_bits(bits, got, jax_cast(x))
    # What JAX does is float64 -> float32 -> bfloat16; ml_dtypes' direct rounding differs
    # exactly where the two roundings disagree (the constructed ties above).
    with np.errstate(over="ignore", invalid="ignore"):
        direct = x.astype(ml_dtypes.bfloat16).view(np.uint16)
        via32 = x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert_same_bits(bits, got, via32)
    assert (direct != via32).sum() >= 900


def test_bfloat16_is_copied(cast_tool):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = c_cast(cast_tool, bits.view(ml_dtypes.bfloat16))
    assert np.array_equal(got, bits)


@pytest.mark.parametrize("name", FLOAT8)
def test_float8_all_patterns(cast_tool, name):
    """Exact (every float8 value is a bfloat16); NaNs as JAX makes them: the quiet NaN of the
    sign, +NaN for the sign-less NaN of the fnuz and e8m0 formats (numpy's cast differs)."""
    bits = np.arange(256, dtype=np.uint16).astype(np.uint8)
    x = bits.view(getattr(ml_dtypes, name))
    want = jax_cast(x)
    assert_same_bits(bits, c_cast(cast_tool, x), want)
    finite = np.isfinite(x.astype(np.float32))
    assert np.array_equal(want[finite].view(ml_dtypes.bfloat16).astype(np.float32),
                          x[finite].astype(np.float32))
