"""Orbax interop: `unroll inspect` against checkpoints written by real Orbax, and Orbax restoring
checkpoints written by unroll's Orbax writer (tests/unit/orbax/orbax_tool).

The Python work runs in subprocesses so that each can set XLA_FLAGS (8 host CPU devices) before
jax is imported. Array contents are compared through FNV-1a 64 digests of the C-order
little-endian bytes (`unroll inspect --hash`)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))
PYTHON = os.environ.get("UNROLL_PYTHON", sys.executable)
LAYOUTS = [(o, z) for o in (True, False) for z in (True, False)]
LAYOUT_IDS = [f"{'ocdbt' if o else 'files'}-zarr{3 if z else 2}" for o, z in LAYOUTS]

COMMON = r"""
import os, sys, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import ml_dtypes
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h ^= x
        h = (h * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % h

def describe(tree):
    out = {}
    for path, v in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = ".".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                        for k in path)
        a = np.asarray(v)
        spec = None
        if isinstance(v, jax.Array) and isinstance(v.sharding, NamedSharding):
            spec = [list(e) if isinstance(e, tuple) else e for e in v.sharding.spec]
        out[name] = {"dtype": str(a.dtype), "shape": list(a.shape),
                     "fnv1a64": fnv1a64(np.ascontiguousarray(a).tobytes()), "spec": spec,
                     "kind": type(v).__name__}
    return out
"""

GEN = COMMON + r"""
root, use_ocdbt, use_zarr3 = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
mesh = Mesh(np.array(jax.devices()).reshape(2, 2, 2), ("fsdp", "stage", "tensor"))
def put(x, *spec):
    return jax.device_put(x, NamedSharding(mesh, P(*spec)))
rng = np.random.default_rng(0)
tree = {
  "params": {"params": {
    "decoder": {
      "layers": {"mlp": {"wi_0": {"kernel": put(
          rng.standard_normal((4, 8, 6)).astype(ml_dtypes.bfloat16), "fsdp", "stage", "tensor")}}},
      "decoder_norm": {"scale": put(rng.standard_normal(6).astype(np.float32), "tensor")},
    },
    "token_embedder": {"embedding": put(
        rng.standard_normal((12, 6)).astype(np.float32), ("fsdp", "stage"), None)},
  }},
  "counts": put(np.arange(10, dtype=np.int32), None),
  "mask": put(rng.integers(0, 2, (3, 5)).astype(bool)),
  "host": np.arange(7, dtype=np.int64),
  "lst": [put(np.arange(4, dtype=np.uint16)), np.float64(1.5)],
  "step": 0,
  "opt_state": {},
}
mngr = ocp.CheckpointManager(
    root, item_names=("items",),
    item_handlers={"items": ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)})
mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(tree)))
mngr.wait_until_finished()
mngr.close()
print(json.dumps(describe(tree)))
"""

RESTORE = COMMON + r"""
root = sys.argv[1]
mngr = ocp.CheckpointManager(root)
plain = mngr.restore(0)
items = plain["items"] if "items" in plain else plain
out = {"no_target": describe(items)}
out["no_target_tree"] = jax.tree_util.tree_map(lambda x: 0, items)
mesh = Mesh(np.array(jax.devices()), ("d",))
def abstract(x):
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P()))
    return x
target = jax.tree_util.tree_map(abstract, items)
mngr2 = ocp.CheckpointManager(root, item_names=("items",))
r = mngr2.restore(0, args=ocp.args.Composite(items=ocp.args.StandardRestore(target)))
out["target"] = describe(r["items"])
print(json.dumps(out))
"""


def run_py(script, *args):
    p = subprocess.run([PYTHON, "-c", script, *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def inspect(unroll_bin, path, *extra):
    p = subprocess.run([str(unroll_bin), "inspect", "--json", "--hash", *extra, str(path)],
                       capture_output=True, text=True, timeout=300)
    return p


@pytest.fixture(scope="module", params=LAYOUTS, ids=LAYOUT_IDS)
def orbax_ckpt(request, fixture_cache):
    use_ocdbt, use_zarr3 = request.param
    root = fixture_cache / f"orbax_interop_{int(use_ocdbt)}{int(use_zarr3)}"
    manifest = root.with_suffix(".json")
    if not manifest.is_file() or not (root / "0" / "items" / "_METADATA").is_file():
        shutil.rmtree(root, ignore_errors=True)
        expected = run_py(GEN, root, int(use_ocdbt), int(use_zarr3))
        manifest.write_text(json.dumps(expected))
    return root, use_ocdbt, use_zarr3, json.loads(manifest.read_text())


def test_inspect_reads_real_orbax(unroll_bin, orbax_ckpt):
    root, use_ocdbt, use_zarr3, expected = orbax_ckpt
    for path in (root / "0", root / "0" / "items"):
        p = inspect(unroll_bin, path)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        assert got["use_ocdbt"] == use_ocdbt
        assert got["use_zarr3"] == use_zarr3
        leaves = {l["name"]: l for l in got["leaves"]}
        # Every Orbax leaf is there (plus the empty opt_state placeholder), in tree order.
        assert set(expected) <= set(leaves)
        assert leaves["opt_state"]["value_type"] == "Dict"
        assert leaves["opt_state"]["skip_deserialize"] is True
        assert [l["name"] for l in got["leaves"]] == sorted(leaves, key=lambda n: [
            (0, int(k), "") if t == "seq" else (1, 0, k)
            for k, t in zip(leaves[n]["keys"], leaves[n]["key_types"])])
        for name, exp in expected.items():
            leaf = leaves[name]
            assert leaf["dtype"] == exp["dtype"], name
            assert leaf["shape"] == exp["shape"], name
            assert leaf["fnv1a64"] == exp["fnv1a64"], name
            if exp["kind"] == "ArrayImpl":
                assert leaf["value_type"] == "jax.Array"
                spec = leaf["sharding"]["partition_spec"]
                want = [",".join(e) if isinstance(e, list) else e for e in exp["spec"]]
                assert spec == want, name
                assert leaf["sharding"]["mesh_axis_names"] == ["fsdp", "stage", "tensor"]
                assert leaf["sharding"]["mesh_shape"] == [2, 2, 2]
        kernel = leaves["params.params.decoder.layers.mlp.wi_0.kernel"]
        assert kernel["keys"] == ["params", "params", "decoder", "layers", "mlp", "wi_0",
                                  "kernel"]
        assert kernel["sharding"]["partition_spec"] == ["fsdp", "stage", "tensor"]
        assert leaves["lst.0"]["key_types"] == ["dict", "seq"]
        assert leaves["step"]["value_type"] == "scalar"
        assert leaves["step"]["shape"] == []
        assert got["total"]["arrays"] == len(expected)


def test_inspect_text_output(unroll_bin, orbax_ckpt):
    root = orbax_ckpt[0]
    p = subprocess.run([str(unroll_bin), "inspect", str(root / "0")], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    assert "P('fsdp', 'stage', 'tensor')" in p.stdout
    assert "P(('fsdp', 'stage'), None)" in p.stdout
    assert "total:" in p.stdout.splitlines()[-1]


def test_inspect_compat_fixtures(unroll_bin, upstream_data):
    base = upstream_data / "orbax-compat"
    ok = 0
    for meta in sorted(base.rglob("_METADATA")):
        item = meta.parent
        if item.name == "dummy" or "critical_metadata_alterations" in item.parts:
            continue
        p = inspect(unroll_bin, item)
        assert p.returncode == 0, (item, p.stderr)
        got = json.loads(p.stdout)
        leaves = {l["name"]: l for l in got["leaves"]}
        assert leaves["a"]["shape"] == [8] and leaves["b.c"]["shape"] == [3], item
        assert leaves["a"]["dtype"] == "int32"
        # int32 0..7 and 0..2 little-endian
        import struct
        def fnv(b):
            h = 0xcbf29ce484222325
            for x in b:
                h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
            return "%016x" % h
        assert leaves["a"]["fnv1a64"] == fnv(struct.pack("<8i", *range(8)))
        ok += 1
    assert ok >= 20


def test_inspect_rejects_broken_fixtures(unroll_bin, upstream_data):
    base = upstream_data / "orbax-compat"
    bad = sorted(base.rglob("critical_metadata_alterations/*"))
    assert bad
    for case in bad:
        p = inspect(unroll_bin, case)
        assert p.returncode != 0, case
        assert p.stderr.startswith("unroll: "), p.stderr


def _damage(tmp_path, src, name, text):
    dst = tmp_path / "ck"
    shutil.copytree(src, dst)
    (dst / "0" / "items" / name).write_text(text)
    return dst / "0"


@pytest.mark.parametrize("name,text,needle", [
    ("_METADATA", "{\"tree_metadata\": ", "_METADATA: invalid JSON"),
    ("_METADATA", "{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", "
     "\"key_type\": 2}], \"value_metadata\": {\"value_type\": \"jax.Array\", "
     "\"skip_deserialize\": \"no\"}}}}", "('a',): skip_deserialize"),
    ("_sharding", "{}", "_sharding: no entry for array 'counts'"),
    ("_sharding", "{\"Y291bnRz\": 5}", "_sharding: 'counts': value is not a string"),
])
def test_inspect_damaged_metadata(unroll_bin, fixture_cache, tmp_path, name, text, needle):
    root = fixture_cache / "orbax_interop_10"
    if not (root / "0" / "items" / "_METADATA").is_file():
        pytest.fail("generate the checkpoints first (test_inspect_reads_real_orbax)")
    ck = _damage(tmp_path, root, name, text)
    p = inspect(unroll_bin, ck)
    assert p.returncode == 4, p.stderr
    assert needle in p.stderr, p.stderr
    assert "items" in p.stderr


def _orbax_tool():
    tool = BUILD / "tests" / "unit" / "orbax" / "orbax_tool"
    if not tool.is_file():
        pytest.fail(f"{tool} not built (set UNROLL_BUILD_DIR)")
    return tool


@pytest.mark.parametrize("use_ocdbt,use_zarr3", LAYOUTS, ids=LAYOUT_IDS)
def test_orbax_restores_unroll_checkpoint(unroll_bin, tmp_path, use_ocdbt, use_zarr3):
    root = tmp_path / "out"
    p = subprocess.run([str(_orbax_tool()), "write", str(root / "0"), str(int(use_ocdbt)),
                        str(int(use_zarr3))], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    written = json.loads(p.stdout)
    assert not list(tmp_path.rglob("*.orbax-checkpoint-tmp"))
    assert (root / "0" / "commit_success.txt").is_file()
    assert (root / "0" / "items" / "commit_success.txt").is_file()

    got = run_py(RESTORE, root)
    for mode in ("no_target", "target"):
        leaves = got[mode]
        for name, exp in written.items():
            assert name in leaves, (mode, name)
            assert leaves[name]["dtype"] == exp["dtype"], (mode, name)
            assert leaves[name]["shape"] == exp["shape"], (mode, name)
            assert leaves[name]["fnv1a64"] == exp["fnv1a64"], (mode, name)
        assert leaves["step"]["dtype"] == "int64" and leaves["step"]["shape"] == []
        assert leaves["layers.0.w"]["dtype"] == "float64"
    assert got["no_target"]["params.arrays.bfloat16"]["kind"] == "ArrayImpl"
    assert got["no_target"]["params.arrays.bfloat16"]["spec"] == ["x", None]
    assert got["no_target_tree"]["opt_state"] == {}
    assert got["no_target_tree"]["step"] == 0
    assert got["no_target_tree"]["layers"][1] is None

    # And unroll reads back what it wrote.
    p = inspect(unroll_bin, root / "0")
    assert p.returncode == 0, p.stderr
    mine = {l["name"]: l for l in json.loads(p.stdout)["leaves"]}
    for name, exp in written.items():
        assert mine[name]["fnv1a64"] == exp["fnv1a64"], name
