"""Correct answers and statuses (issue 12, items 10 and 11), each against real Orbax / JAX:

* a rank-0 array inside the scanned layer group: MaxText cannot unroll it (jnp.take on
  param_scan_axis fails), so the conversion and `verify` both refuse it, exit 4, same words;
* a key path deeper than 64 levels converts (no fixed depth limit);
* float8 parameters are cast to bfloat16 exactly as JAX's astype does, and the dry run says
  what the run does.
"""
import pathlib
import subprocess

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import orbax.checkpoint as ocp
import pytest

import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
LAYERS = 3


def _save(root: pathlib.Path, tree) -> pathlib.Path:
    """Save `tree` as MaxText's CheckpointManager does: <root>/0/items."""
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    with ocp.CheckpointManager(root, item_names=("items",),
                               item_handlers={"items": handler}) as mngr:
        mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(item=tree)))
        mngr.wait_until_finished()
    return root / "0" / "items"


def _unroll(unroll_bin, items, out, *extra):
    args = [str(unroll_bin), str(CONFIG), f"load_parameters_path={items}",
            f"base_output_directory={out}", "run_name=run", "force_unroll=true",
            "pure_nnx=false", f"base_num_decoder_layers={LAYERS}", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def _verify(unroll_bin, scanned, unrolled):
    return subprocess.run([str(unroll_bin), "verify", str(scanned), str(unrolled)],
                          capture_output=True, text=True, timeout=300)


def _layers(extra: dict) -> dict:
    rng = np.random.default_rng(12)
    layers = {"mlp": {"wi": {"kernel": rng.standard_normal((8, LAYERS, 4), np.float32)}}}
    layers.update(extra)
    return {"params": {"params": {"decoder": {"layers": layers,
                                              "norm": {"scale": np.ones(8, np.float32)}}}}}


def _output_items(out: pathlib.Path) -> pathlib.Path:
    return out / "run" / "checkpoints" / "0" / "items"


# ---- item 10: a rank-0 leaf under the scanned group -----------------------------------------

RANK0 = ("rank-0 leaf under the scanned group decoder/layers has no layer axis (a scanned "
         "model stacks every parameter of the group)")


def test_maxtext_cannot_unroll_a_rank0_leaf():
    """generate_param_only_checkpoint takes layer i of every leaf of the group with
    jnp.take(x, i, axis=param_scan_axis): a rank-0 array has no such axis."""
    with pytest.raises(Exception, match="axis"):
        jnp.take(jnp.float32(0.5), 0, axis=1)
    with pytest.raises(reference.ReferenceError, match="no layer axis"):
        reference.unroll_params(_layers({"temp": np.float32(0.5)})["params"]["params"],
                                num_decoder_layers=LAYERS)


@pytest.mark.parametrize("dry_run", [False, True])
def test_rank0_leaf_under_layers_is_refused(unroll_bin, tmp_path, dry_run):
    items = _save(tmp_path / "in", _layers({"temp": jnp.float32(0.5)}))
    res = _unroll(unroll_bin, items, tmp_path / "out", *(["-n"] if dry_run else []))
    assert res.returncode == 4, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "leaf 'params/params/decoder/layers/temp': " + RANK0 in lines[0], lines[0]
    assert not (tmp_path / "out" / "run" / "checkpoints").exists()


def test_verify_refuses_rank0_leaf_like_the_conversion(unroll_bin, tmp_path):
    """The output an earlier unroll wrote (the scalar copied into every layer), saved with
    Orbax: verify names the same leaf with the same words and the same status."""
    scanned_tree = _layers({"temp": jnp.float32(0.5)})
    scanned = _save(tmp_path / "in", scanned_tree)
    kernel = scanned_tree["params"]["params"]["decoder"]["layers"]["mlp"]["wi"]["kernel"]
    decoder = {"norm": {"scale": np.ones(8, ml_dtypes.bfloat16)}}
    for i in range(LAYERS):
        decoder[f"layers_{i}"] = {
            "mlp": {"wi": {"kernel": np.take(kernel, i, axis=1).astype(ml_dtypes.bfloat16)}},
            "temp": np.asarray(0.5, ml_dtypes.bfloat16)}
    out = _save(tmp_path / "out",
                {"step": 0, "params": {"params": {"decoder": decoder}}, "opt_state": {}})
    res = _verify(unroll_bin, scanned, out)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "leaf 'decoder/layers/temp': " + RANK0 in res.stderr, res.stderr


def test_empty_entry_under_layers_is_kept_in_every_layer(unroll_bin, tmp_path):
    """What MaxText does with an empty entry of the group: tree_map keeps it in each layer."""
    items = _save(tmp_path / "in", _layers({"aux": {}}))
    res = _unroll(unroll_bin, items, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    got = reference.restore(_output_items(tmp_path / "out"))
    for i in range(LAYERS):
        assert got["params"]["params"]["decoder"][f"layers_{i}"]["aux"] == {}
    v = _verify(unroll_bin, items, _output_items(tmp_path / "out"))
    assert v.returncode == 0, v.stdout + v.stderr


# ---- item 11: float8 parameters ---------------------------------------------------------------

# The float8 formats Orbax can save (TensorStore has no float8_e4m3; the C cast of all 256
# codes of that one is checked in test_tensor_cast.py).
FLOAT8_SAVED = ("float8_e3m4", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz",
                "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")


def _dry_run_dtypes(stdout: str) -> dict:
    """{input leaf: output dtype} from the dry run's per-leaf lines."""
    out = {}
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] in ("split", "copy"):
            out[words[1]] = words[-1]
    return out


@pytest.mark.parametrize("name", FLOAT8_SAVED)
def test_float8_dry_run_says_what_the_run_does(unroll_bin, tmp_path, name):
    """Every one of the 256 codes, in a scanned leaf and in a copied one: the dry run plans the
    cast to bfloat16, the run does it, bit-identical to jnp.astype, and verify agrees."""
    dt = getattr(ml_dtypes, name)
    codes = np.arange(256 * LAYERS, dtype=np.uint32).astype(np.uint8)
    w8 = codes.reshape(8, LAYERS, 32).view(dt)
    e8 = np.arange(256, dtype=np.uint32).astype(np.uint8).view(dt)
    tree = _layers({"w8": {"kernel": w8}})
    tree["params"]["params"]["decoder"]["embed8"] = e8
    items = _save(tmp_path / "in", tree)

    dry = _unroll(unroll_bin, items, tmp_path / "out", "-n")
    assert dry.returncode == 0, dry.stderr
    planned = _dry_run_dtypes(dry.stdout)
    assert planned["params/params/decoder/layers/w8/kernel"] == "bfloat16", dry.stdout
    assert planned["params/params/decoder/embed8"] == "bfloat16", dry.stdout
    assert not (tmp_path / "out").exists()

    res = _unroll(unroll_bin, items, tmp_path / "out")
    assert res.returncode == 0, res.stderr
    got = reference.restore(_output_items(tmp_path / "out"))["params"]["params"]["decoder"]

    def jax_bits(x):
        return np.asarray(jnp.asarray(x).astype(jnp.bfloat16)).view(np.uint16)

    for i in range(LAYERS):
        out = np.asarray(got[f"layers_{i}"]["w8"]["kernel"])
        assert out.dtype == ml_dtypes.bfloat16
        assert np.array_equal(out.view(np.uint16), jax_bits(np.take(w8, i, axis=1)))
    assert np.array_equal(np.asarray(got["embed8"]).view(np.uint16), jax_bits(e8))
    v = _verify(unroll_bin, items, _output_items(tmp_path / "out"))
    assert v.returncode == 0, v.stdout + v.stderr


# ---- item 11: key paths deeper than 64 levels ----------------------------------------------

DEPTH = 100  # beyond every fixed limit unroll had (64 in the conversion, 96 in verify)


def _nest(leaf, prefix: str) -> dict:
    node = {"w": leaf}
    for i in reversed(range(DEPTH)):
        node = {f"{prefix}{i}": node}
    return node


def test_key_path_deeper_than_64_levels_converts(unroll_bin, tmp_path):
    """A real Orbax checkpoint with a 100-level dict, once copied and once in the layer group:
    converted (no fixed depth limit), restored by Orbax as the reference unroll says, and
    verify agrees."""
    tree = _layers({"deep": _nest(np.arange(6 * LAYERS, dtype=np.float32).reshape(6, LAYERS),
                                  "s")})
    tree["params"]["params"]["decoder"]["deep"] = _nest(np.arange(5, dtype=np.float32), "c")
    items = _save(tmp_path / "in", tree)
    for nnx in (False, True):
        out = tmp_path / f"out-{nnx}"
        res = _unroll(unroll_bin, items, out, f"pure_nnx={str(nnx).lower()}")
        assert res.returncode == 0, res.stderr
        expected = reference.reference_unroll(items, num_decoder_layers=LAYERS, pure_nnx=nnx)
        reference.check_unrolled(_output_items(out), expected)
        v = _verify(unroll_bin, items, _output_items(out))
        assert v.returncode == 0, v.stdout + v.stderr
