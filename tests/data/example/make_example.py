"""Regenerate tests/data/example/checkpoints: a tiny scanned Linen full-state MaxText checkpoint.

Run from anywhere with the pinned test stack (tests/interop/requirements.txt):

    .venv/bin/python tests/data/example/make_example.py

It writes, with real Orbax (CheckpointManager, item `items`, use_ocdbt=True, use_zarr3=True),
the `linen` float32 fixture of tests/interop/maxtext_fixtures.py: step 9 of a llama2-style model
with 3 scanned decoder layers (param_scan_axis 1) and an Adam optimizer state, saved from a
CPU mesh of 8 devices, to tests/data/example/checkpoints/9/items. OCDBT data file names are
random, so a rerun gives different file names with the same content.
"""
import os
import pathlib
import shutil
import sys
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "interop"))

import maxtext_fixtures  # noqa: E402


def main() -> None:
    dest = HERE / "checkpoints"
    with tempfile.TemporaryDirectory(dir=HERE) as tmp:
        info = maxtext_fixtures.write_checkpoint("linen", "ocdbt-zarr3", "float32",
                                                 pathlib.Path(tmp) / "x")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(info.root, dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"wrote {dest} ({size} bytes); config for an unroll run:")
    for key, value in info.config.items():
        if key != "load_full_state_path":
            print(f"  {key}={value}")


if __name__ == "__main__":
    main()
