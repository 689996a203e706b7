"""Shared pytest fixtures for the interoperability tests.

These tests use the real Python stack (jax, orbax-checkpoint, tensorstore) as the oracle for
what `unroll` reads and writes. Paths come from the environment that scripts/test.sh sets:

  UNROLL_BIN           the unroll executable (default: build/src/cli/unroll)
  UNROLL_FIXTURE_CACHE where generated checkpoints are cached (default: build/fixtures)
"""
import os
import pathlib

# jax must see 8 CPU devices (the fixtures are saved from a 4x2 mesh); this has to happen before
# anything imports jax, and pytest imports conftest.py first.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEST_DATA = ROOT / "tests" / "data"
UPSTREAM_DATA = TEST_DATA / "upstream"


def pytest_configure(config):
    # Orbax warns on every restore without a target (the tests do that on purpose).
    config.addinivalue_line(
        "filterwarnings", "ignore:Sharding info not provided when restoring:UserWarning")


@pytest.fixture(scope="session")
def unroll_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("UNROLL_BIN", ROOT / "build" / "src" / "cli" / "unroll"))
    if not path.is_file():
        pytest.fail(f"unroll binary not found at {path}: build it first (scripts/test.sh does)")
    return path


@pytest.fixture(scope="session")
def fixture_cache() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("UNROLL_FIXTURE_CACHE", ROOT / "build" / "fixtures"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def upstream_data() -> pathlib.Path:
    """tests/data/upstream: checkpoints and databases written by real Orbax and TensorStore."""
    if not UPSTREAM_DATA.is_dir():
        pytest.fail(f"upstream test data not found at {UPSTREAM_DATA}")
    return UPSTREAM_DATA


@pytest.fixture(scope="session")
def make_fixture(fixture_cache):
    """make_fixture(kind, layout="ocdbt-zarr3", dtype="float32") -> maxtext_fixtures.FixtureInfo.

    Generates the checkpoint with real Orbax on first use and caches it under fixture_cache
    (see maxtext_fixtures.make_checkpoint); `.items` is the item dir, `.root` the
    CheckpointManager root (for kind "lora": the adapters directory).
    """
    import maxtext_fixtures

    def make(kind, layout=maxtext_fixtures.DEFAULT_LAYOUT, dtype="float32"):
        return maxtext_fixtures.make_checkpoint(kind, layout, dtype, fixture_cache)

    return make


@pytest.fixture(scope="session")
def example_checkpoint() -> pathlib.Path:
    """The committed example (tests/data/example): its `checkpoints` root, step 9."""
    path = TEST_DATA / "example" / "checkpoints"
    if not (path / "9" / "items" / "_METADATA").is_file():
        pytest.fail(f"example checkpoint missing at {path}")
    return path
