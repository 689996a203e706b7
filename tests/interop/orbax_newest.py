"""The newest Orbax (tests/interop/requirements-orbax-newest.txt) as a second writer and reader,
run by test_orbax_newest.py as a subprocess of .venv's Python with the newest package first on
PYTHONPATH (its other requirements are the pinned stack's).

  python orbax_newest.py write <dir>        one checkpoint per save style under <dir>/<style>/,
                                             and <dir>/styles.json: {style: item dir}
  python orbax_newest.py read <json file>   restores each item dir listed ({name: item dir}) and
                                             prints {name: {leaf: sha256 of its bytes}}

The save styles are what this Orbax writes, on the fixture state of maxtext_fixtures (kind
"linen": MaxText's full training state, sharded over 8 CPU devices):
  items      CheckpointManager, item `items`, as MaxText saves (PyTreeSave, chunk and file
             size targets as MaxText sets them)
  state      the same with the item named `state`
  default    CheckpointManager with one unnamed item: Orbax names it `default`
  v1         the new API, orbax.checkpoint.experimental.v1.save_pytree (no item marker; an
             `orbax.checkpoint` file beside the item)
  replica    replica-parallel saving into separate folders: replicated arrays in
             `ocdbt.process_replica_0/`
  controller host (numpy) arrays written by a single controller whose OCDBT process id is a
             name, not a number (`ocdbt.process_ctl7/`)
  split      OCDBT B-tree nodes in `ocdbt_meta/` apart from the values (Orbax's
             store_ocdbt_metadata_and_values_separately; not reachable from its public API in
             this release, so the one write option is switched on around Orbax's own spec
             builder)
"""
import dataclasses
import hashlib
import json
import os
import pathlib
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

import maxtext_fixtures as mf  # noqa: E402

STYLES = ("items", "state", "default", "v1", "replica", "controller", "split")


def _manager(root, name, handler):
    opts = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    return ocp.CheckpointManager(root, item_names=(name,), item_handlers={name: handler},
                                 options=opts)


def _save_named(root, step, name, tree, handler=None):
    handler = handler or ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    save_args = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=mf.MAXTEXT_CHUNK_BYTES),
                             tree)
    with _manager(root, name, handler) as m:
        m.save(step, args=ocp.args.Composite(**{name: ocp.args.PyTreeSave(
            item=tree, save_args=save_args,
            ocdbt_target_data_file_size=mf.MAXTEXT_CHUNK_BYTES)}))
        m.wait_until_finished()
    return root / str(step) / name


def _registry(*pairs):
    from orbax.checkpoint._src.serialization import type_handler_registry
    return type_handler_registry.create_type_handler_registry(*pairs)


def save(style, root, step, tree):
    """Save `tree` at step `step` under `root` in `style`; returns the item directory."""
    if style in ("items", "state"):
        return _save_named(root, step, style, tree)
    if style == "default":
        opts = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
        with ocp.CheckpointManager(root, options=opts) as m:
            m.save(step, args=ocp.args.PyTreeSave(item=tree))
            m.wait_until_finished()
        return root / str(step) / "default"
    if style == "v1":
        import orbax.checkpoint.experimental.v1 as v1
        v1.save_pytree(root / str(step), tree)
        items = [p for p in (root / str(step)).iterdir() if (p / "_METADATA").is_file()]
        if len(items) != 1:
            raise RuntimeError(f"v1 save_pytree wrote items {items}")
        return items[0]
    if style == "replica":
        from orbax.checkpoint._src.serialization import jax_array_handlers
        handler = jax_array_handlers.ArrayHandler(use_replica_parallel=True,
                                                  enable_replica_parallel_separate_folder=True)
        return _save_named(root, step, "items", tree, ocp.PyTreeCheckpointHandler(
            use_ocdbt=True, use_zarr3=True, type_handler_registry=_registry((jax.Array, handler))))
    if style == "controller":
        from orbax.checkpoint._src.serialization import type_handlers
        host = jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, tree)
        handler = type_handlers.NumpyHandler(ocdbt_process_id="ctl7")
        return _save_named(root, step, "items", host, ocp.PyTreeCheckpointHandler(
            use_ocdbt=True, use_zarr3=True, type_handler_registry=_registry((np.ndarray, handler))))
    if style == "split":
        from orbax.checkpoint._src.serialization import tensorstore_utils as tsu
        build = tsu._build_ocdbt_kvstore_tspec

        def split(*args, write_options=None, **kwargs):
            if write_options is not None:
                write_options = dataclasses.replace(
                    write_options, store_ocdbt_metadata_and_values_separately=True)
            return build(*args, write_options=write_options, **kwargs)

        tsu._build_ocdbt_kvstore_tspec = split
        try:
            return _save_named(root, step, "items", tree)
        finally:
            tsu._build_ocdbt_kvstore_tspec = build
    raise ValueError(f"unknown style {style!r}")


def write(out: pathlib.Path) -> None:
    state, b, mesh_shape, _, step = mf._build("linen", "float32")
    tree = mf._shard(state, b.specs, mf._mesh(mesh_shape))
    made = {}
    for style in STYLES:
        made[style] = str(save(style, (out / style).absolute(), step, tree))
    (out / "styles.json").write_text(json.dumps({"orbax": ocp.__version__, "step": step,
                                                 "items": made}, indent=2))


def digests(tree) -> dict:
    out = {}
    for path, leaf in mf.flatten(tree).items():
        if isinstance(leaf, (np.ndarray, jax.Array)):
            a = np.asarray(leaf)
            out["/".join(path)] = f"{a.dtype}{list(a.shape)}:" + hashlib.sha256(
                np.ascontiguousarray(a).tobytes()).hexdigest()
    return out


def read(listing: pathlib.Path) -> None:
    dirs = json.loads(listing.read_text())
    got = {"orbax": ocp.__version__}
    for name, items in dirs.items():
        with ocp.PyTreeCheckpointer() as c:
            got[name] = digests(c.restore(items))
    print(json.dumps(got))


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](pathlib.Path(sys.argv[2]))
