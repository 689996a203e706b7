"""Shared pytest fixtures for the interoperability tests.

These tests use the real Python stack (jax, orbax-checkpoint, tensorstore) as the oracle for
what `unroll` reads and writes. Paths come from the environment that scripts/test.sh sets:

  UNROLL_BIN           the unroll executable (default: build/src/cli/unroll)
  UNROLL_FIXTURE_CACHE where generated checkpoints are cached (default: build/fixtures)
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"
TEST_DATA = ROOT / "tests" / "data"


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
def shared_fixtures() -> pathlib.Path:
    if not SHARED_FIXTURES.is_dir():
        pytest.fail(f"shared fixtures not found at {SHARED_FIXTURES}")
    return SHARED_FIXTURES
