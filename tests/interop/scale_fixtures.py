"""Param-only MaxText checkpoints with many small leaves, written by real Orbax, for the
scaling tests (issue 12 item 8): `decoder/layers/<block>/<w>` holds `n_leaves` scanned
leaves of shape (4, LAYERS) (layer axis 1 = param_scan_axis), so one run of `unroll` handles
n_leaves input arrays and n_leaves * LAYERS output arrays of a few bytes each.

    python scale_fixtures.py <n_leaves> <dir>     # writes <dir>/checkpoints/0/items

Cached like maxtext_fixtures (key: leaf count + a hash of this file)."""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

LAYERS = 2
PER_BLOCK = 100


def _source_hash() -> str:
    return hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:12]


def leaf_path(i: int) -> tuple:
    return ("decoder", "layers", f"b{i // PER_BLOCK:04d}", f"w{i % PER_BLOCK:02d}")


def leaf_value(i: int) -> np.ndarray:
    return (np.arange(4 * LAYERS, dtype=np.float32).reshape(4, LAYERS) + np.float32(i))


def params_tree(n_leaves: int) -> dict:
    tree: dict = {}
    for i in range(n_leaves):
        node = tree
        for k in leaf_path(i)[:-1]:
            node = node.setdefault(k, {})
        node[leaf_path(i)[-1]] = leaf_value(i)
    return tree


def write(n_leaves: int, base: pathlib.Path) -> pathlib.Path:
    import jax
    import orbax.checkpoint as ocp

    params = jax.tree.map(jax.numpy.asarray, params_tree(n_leaves))
    state = {"step": 0, "params": {"params": params}, "opt_state": {}}
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    options = ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False)
    root = base / "checkpoints"
    with ocp.CheckpointManager(root, item_names=("items",), item_handlers={"items": handler},
                               options=options) as mngr:
        mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=state)))
        mngr.wait_until_finished()
    items = root / "0" / "items"
    if not (items / "_METADATA").is_file():
        raise RuntimeError(f"Orbax did not write {items}")
    return items


def make(n_leaves: int, cache_dir) -> pathlib.Path:
    """The items dir of a cached (or newly written) checkpoint of n_leaves leaves."""
    cache_dir = pathlib.Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / f"scale-{n_leaves}-{_source_hash()}"
    items = final / "checkpoints" / "0" / "items"
    if (final / "done").is_file():
        return items
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_dir))
    try:
        write(n_leaves, tmp / "x")
        (tmp / "x" / "done").write_text("")
        try:
            os.rename(tmp / "x", final)
        except OSError:
            if not (final / "done").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return items


if __name__ == "__main__":
    print(make(int(sys.argv[1]), sys.argv[2]))
