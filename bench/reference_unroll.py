"""The Python reference pipeline: what MaxText's generate_param_only_checkpoint does with
force_unroll=true, pure_nnx=false (docs/maxtext-checkpoints.md section 3.1, 3.2), on a
checkpoint written by bench/make_checkpoint.py, with the same 8-device CPU mesh.

  reference_unroll.py run --checkpoint GEN_OUT --base-output-directory DIR --run-name NAME
      1. rmtree <DIR>/<NAME>/checkpoints/ (as MaxText does), create the Orbax manager there
         (PyTreeCheckpointHandler use_ocdbt=True, use_zarr3=True, concurrent GB 96)
      2. restore the FULL training state (step, params, opt_state) from the `items` item with
         the abstract state as target (every leaf a jax.Array with its NamedSharding)
      3. for i in range(L): jax.jit(take(x, i, axis=1) on every leaf of decoder/layers,
         out_shardings=<spec without the layer axis>) -> decoder/layers_<i>; delete the stacked
         arrays
      4. decode state = TrainState(step=0, params=tree_map(astype(bfloat16), params),
         opt_state={}) (maxtext_utils.init_decode_state)
      5. save at step 0 with SaveArgs(chunk_byte_size=2 GiB), ocdbt_target_data_file_size=2 GiB
         -> <DIR>/<NAME>/checkpoints/0/items
      Phase times go to stderr and, with --times FILE, to a JSON file.

  reference_unroll.py compare A_ITEMS B_ITEMS
      restores both checkpoints with Orbax (numpy, no target) and compares every leaf bit for
      bit (same tree, dtypes, shapes, bytes) and the key sets of their _METADATA trees; exit
      status 1 on any difference. Differing value_type / skip_deserialize in _METADATA are
      printed as notes (not failures).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _DEVICES_FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_checkpoint as mc  # noqa: E402

PARAM_SCAN_AXIS = 1


def _manager(directory: pathlib.Path):
    import orbax.checkpoint as ocp

    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True,
                                          save_concurrent_gb=96, restore_concurrent_gb=96)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    return ocp.CheckpointManager(directory, item_names=("items",),
                                 item_handlers={"items": handler}, options=options)


def _restore_remote(root: str, step: int, target, restore_args):
    """Step 2 from an object store: the same handler, restoring <root>/<step>/items straight
    from the bucket (TensorStore's gcs driver reads the arrays, etils.epath the metadata). A
    Checkpointer rather than a CheckpointManager: the manager's step listing on gs:// needs
    google-cloud-storage, which the test stack does not have; the restore is the same work."""
    import orbax.checkpoint as ocp
    from etils import epath

    if not root.startswith("gs://"):
        raise SystemExit(f"--input {root}: only gs:// (an emulator) is supported")
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "interop"))
    import gcs_fsspec  # an fsspec gs:// for the emulator (gcsfs is not in the test stack)

    gcs_fsspec.register()
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True,
                                          save_concurrent_gb=96, restore_concurrent_gb=96)
    with ocp.Checkpointer(handler) as ckptr:
        return ckptr.restore(epath.Path(f"{root.rstrip('/')}/{step}/items"),
                             args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args))


def cmd_run(args) -> None:
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from flax.training import train_state
    from jax.sharding import NamedSharding, PartitionSpec as P

    times = {}
    t_all = time.monotonic()
    gen = pathlib.Path(args.checkpoint).resolve()
    info = json.loads((gen / "bench_checkpoint.json").read_text())
    dims = info["dims"]
    mesh = mc.make_mesh()

    checkpoint_dir = (pathlib.Path(args.base_output_directory) / args.run_name
                      / "checkpoints").resolve()
    if checkpoint_dir.exists():
        shutil.rmtree(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True)

    # 2. restore the full state
    t0 = time.monotonic()
    target = mc.abstract_state(dims, mesh)
    restore_args = ocp.checkpoint_utils.construct_restore_args(target)
    if args.input:
        state = _restore_remote(args.input, info["step"], target, restore_args)
    else:
        with _manager(gen / "checkpoints") as src:
            restored = src.restore(info["step"], args=ocp.args.Composite(
                items=ocp.args.PyTreeRestore(item=target, restore_args=restore_args)))
        state = restored["items"]
    jax.block_until_ready(state)
    if not state["opt_state"]:
        raise SystemExit("missing opt_state in training checkpoint")
    times["restore_s"] = time.monotonic() - t0

    # 3. unroll (Linen branch of _possibly_unroll_params)
    t0 = time.monotonic()
    decoder = state["params"]["params"]["decoder"]
    layers = decoder["layers"]

    def drop_scan_axis(x):
        # the restored leaf's mesh spec (= MaxText's annotation) without the layer axis
        s = tuple(x.sharding.spec) + (None,) * (x.ndim - len(x.sharding.spec))
        return NamedSharding(mesh, P(*(s[0:PARAM_SCAN_AXIS] + s[PARAM_SCAN_AXIS + 1:])))

    new_sharding = jax.tree.map(drop_scan_axis, layers)
    for i in range(dims["layers"]):
        def slice_ith(input_layers, i=i):
            return jax.tree.map(lambda x: jnp.take(x, i, axis=PARAM_SCAN_AXIS), input_layers)

        decoder[f"layers_{i}"] = jax.jit(slice_ith, out_shardings=new_sharding)(layers)
    del decoder["layers"]
    jax.tree.map(lambda x: x.delete(), layers)
    del layers
    jax.block_until_ready(decoder)
    times["unroll_s"] = time.monotonic() - t0

    # 4. decode state, bf16
    t0 = time.monotonic()
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), state["params"])
    jax.block_until_ready(params)
    del state
    decode_state = train_state.TrainState(step=0, apply_fn=None, params=params, tx=None,
                                          opt_state={})
    times["cast_s"] = time.monotonic() - t0

    # 5. save at step 0 (checkpointing.save_checkpoint with config=None)
    t0 = time.monotonic()
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=mc.MAXTEXT_CHUNK_BYTES),
                             decode_state)
    with _manager(checkpoint_dir) as dst:
        dst.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(
            item=decode_state, save_args=save_args,
            ocdbt_target_data_file_size=mc.MAXTEXT_CHUNK_BYTES)))
        dst.wait_until_finished()
    times["save_s"] = time.monotonic() - t0
    times["total_s"] = time.monotonic() - t_all
    items = checkpoint_dir / "0" / "items"
    if not (items / "_METADATA").is_file():
        raise SystemExit(f"Orbax did not write {items}")
    times = {k: round(v, 3) for k, v in times.items()}
    print(json.dumps({"items": str(items), **times}), file=sys.stderr)
    if args.times:
        pathlib.Path(args.times).write_text(json.dumps(times, indent=2) + "\n")


def _restore_numpy(items: pathlib.Path) -> dict:
    """{path tuple: numpy value or None/empty} of an Orbax PyTree item, without a target."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    items = items.resolve()
    with ocp.PyTreeCheckpointer() as ckptr:
        meta = ckptr.metadata(items)
        tree = meta.item_metadata.tree if hasattr(meta, "item_metadata") else meta.tree

        def rargs(m):
            if hasattr(m, "shape"):
                return ocp.RestoreArgs(restore_type=np.ndarray)
            return ocp.RestoreArgs()

        restore_args = jax.tree.map(rargs, tree)
        restored = ckptr.restore(items, args=ocp.args.PyTreeRestore(restore_args=restore_args))
    flat, _ = jax.tree_util.tree_flatten_with_path(restored)
    return {jax.tree_util.keystr(p): v for p, v in flat}


def compare(a: pathlib.Path, b: pathlib.Path) -> tuple:
    """(differences, notes, leaf count) for two Orbax items; no differences: bit for bit equal."""
    import numpy as np

    ta, tb = _restore_numpy(a), _restore_numpy(b)
    diffs = []
    for k in sorted(set(ta) | set(tb)):
        if k not in ta or k not in tb:
            diffs.append(f"{k}: only in {'A' if k in ta else 'B'}")
            continue
        x, y = np.asarray(ta[k]), np.asarray(tb[k])
        if x.dtype != y.dtype or x.shape != y.shape:
            diffs.append(f"{k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
        elif x.tobytes() != y.tobytes():
            xb = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, -1)
            yb = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(y.size, -1)
            n = int((xb != yb).any(axis=1).sum())
            diffs.append(f"{k}: {n} of {x.size} elements differ")
    # the tree structures themselves (empty opt_state etc.) from _METADATA
    ma = json.loads((a / "_METADATA").read_text())["tree_metadata"]
    mb = json.loads((b / "_METADATA").read_text())["tree_metadata"]
    if sorted(ma) != sorted(mb):
        diffs.append(f"_METADATA trees differ: {sorted(set(ma) ^ set(mb))[:10]}")
    notes = []
    for k in sorted(set(ma) & set(mb)):
        va, vb = ma[k]["value_metadata"], mb[k]["value_metadata"]
        for field in ("value_type", "skip_deserialize"):
            if va.get(field) != vb.get(field):
                notes.append(f"note: {k} {field}: {va.get(field)!r} vs {vb.get(field)!r}")
    return diffs, notes, len(ta)


def cmd_compare(args) -> None:
    diffs, notes, n = compare(pathlib.Path(args.a), pathlib.Path(args.b))
    for d in diffs + notes:
        print(d)
    if diffs:
        print(f"DIFFER: {len(diffs)} of {n} leaves", file=sys.stderr)
        sys.exit(1)
    print(f"identical: {n} leaves, bit for bit", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--checkpoint", required=True, help="make_checkpoint.py --out directory")
    r.add_argument("--base-output-directory", required=True)
    r.add_argument("--run-name", required=True)
    r.add_argument("--times", help="write the phase times here (JSON)")
    r.add_argument("--input", help="read the checkpoint from this copy of its checkpoints/ "
                   "directory instead: gs://bucket/prefix on the emulator that "
                   "STORAGE_EMULATOR_HOST and TENSORSTORE_GCS_HTTP_URL name (bench/gcs_bench.py)")
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.set_defaults(fn=cmd_compare)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
