"""bench/make_checkpoint.py writes its checkpoints leaf by leaf, slice by slice (issue 27, item
1: a 30 GiB full state within the generator's memory). What it writes must be what Orbax writes
for the same values held as jax.Arrays: the streamed checkpoint (a 1 MiB write window, so
that slices of one leaf are in flight while others wait) and the eager one (--eager: whole
jax.Arrays, Orbax's own ArrayHandler) are compared key by key in their OCDBT databases (every
zarr.json and every stored chunk, byte for byte), and in their _METADATA, _sharding and array
metadata; then stock Orbax restores the streamed one as the full TrainState onto its 8-device
shardings and every leaf is compared with the generator's values."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAKE = ROOT / "bench" / "make_checkpoint.py"
LAYERS = 3


def make(out: pathlib.Path, *extra, env=None) -> pathlib.Path:
    subprocess.run([sys.executable, str(MAKE), "make", "--layers", str(LAYERS), "--out",
                    str(out), *extra], check=True, capture_output=True, timeout=600,
                   env={**os.environ, **(env or {})})
    meta = json.loads((out / "bench_checkpoint.json").read_text())
    return out / "checkpoints" / str(meta["step"]) / "items"


def ocdbt_items(items: pathlib.Path) -> dict:
    import tensorstore as ts
    kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{items}/"}).result()
    return {k: kv.read(k).result().value for k in kv.list().result()}


def array_metadatas(items: pathlib.Path) -> list:
    entries = json.loads((items / "array_metadatas" / "process_0").read_text())
    return sorted(json.dumps(e, sort_keys=True) for e in entries["array_metadatas"])


RESTORE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import make_checkpoint as m  # sets XLA_FLAGS for 8 CPU devices before jax loads
import jax, numpy as np, orbax.checkpoint as ocp
info = json.load(open(sys.argv[2]))
d, mesh = info["dims"], m.make_mesh()
target = m.abstract_state(d, mesh)
restore_args = ocp.checkpoint_utils.construct_restore_args(target)
state = ocp.PyTreeCheckpointer().restore(info["items"], args=ocp.args.PyTreeRestore(
    item=target, restore_args=restore_args))
expect = m.state_tree(d, mesh,
    lambda path, logical, shape, sh: m.LazyLeaf(
        {p: i for i, (p, _, _) in enumerate(m.leaf_table(d))}[
            path[2:] if path[0] == "params" else path[4:]], logical, shape, sh, info["seed"]),
    lambda path, sh: np.int32(m.STEP))
got, tree = jax.tree_util.tree_flatten_with_path(state)
want = jax.tree_util.tree_flatten_with_path(expect)[0]
assert tree == jax.tree_util.tree_structure(expect), "restored tree differs"
n = 0
for (path, a), (_, e) in zip(got, want):
    assert isinstance(a, jax.Array), (path, type(a))
    if isinstance(e, m.LazyLeaf):
        assert a.sharding == e.sharding, path
        for shard in a.addressable_shards:  # the generator's values are made per shard
            v = e.block(shard.index)
            assert np.asarray(shard.data).dtype == v.dtype, path
            assert np.array_equal(np.asarray(shard.data), v), (path, shard.index)
    else:
        assert np.asarray(a) == e, path
    n += 1
print(n)
"""


def test_streamed_checkpoint_is_orbaxs_own(tmp_path):
    streamed = make(tmp_path / "streamed", env={"BENCH_WINDOW_MIB": "1"})
    eager = make(tmp_path / "eager", "--eager")

    a, b = ocdbt_items(streamed), ocdbt_items(eager)
    assert sorted(a) == sorted(b)
    assert any(k.endswith(b"/zarr.json") for k in a) and len(a) > 30
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, f"{len(differ)} keys differ, e.g. {differ[:3]}"
    for name in ("_METADATA", "_sharding"):
        assert (streamed / name).read_bytes() == (eager / name).read_bytes(), name
    assert array_metadatas(streamed) == array_metadatas(eager)

    res = subprocess.run([sys.executable, "-c", RESTORE, str(ROOT / "bench"),
                          str(streamed.parents[2] / "bench_checkpoint.json")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    leaves = int(res.stdout.split()[-1])
    assert leaves == 3 + 3 * 12  # step, two counts; params, mu, nu of 12 leaves each
