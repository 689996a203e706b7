"""Copy the zarr values of two real Orbax checkpoints into tests/data/zarr/ (plain files).

Source (Apache-2.0): tests/data/upstream/orbax-compat/ = google/orbax @ 3ff7b24aa0e2,
checkpoint/orbax/checkpoint/experimental/v1/_src/testing/compatibility/checkpoints/.
The values live inside OCDBT databases; TensorStore's ocdbt driver reads them out.
Run with the pinned stack (tensorstore 0.1.85): /tmp/venvtest/bin/python gen_zarr_fixtures.py
"""
import pathlib

import tensorstore as ts

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIX = ROOT.parent / "shared" / "fixtures" / "orbax-compat"
OUT = ROOT / "tests" / "data" / "zarr"
SOURCES = {
    "orbax_v0": FIX / "v0_checkpoints/composite_checkpoint/checkpoint_metadata_present/"
                      "pytree_checkpointable_has_metadata/state",
    "orbax_v1": FIX / "v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/"
                      "pytree_checkpointable_has_metadata/state",
}

for name, src in SOURCES.items():
    kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{src}/"}).result()
    for key in kv.list().result():
        key = key.decode()
        if not key.startswith(("a/", "b.c/")):
            continue
        dst = OUT / name / key
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(kv.read(key).result().value)
        print(dst.relative_to(ROOT), dst.stat().st_size)
