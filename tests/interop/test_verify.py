"""`unroll verify <scanned> <unrolled>`: passes on good outputs, exits 6 naming the leaf on a
corrupted value, a missing leaf, an extra leaf, a wrong dtype; the corruptions are made with
stock TensorStore / Orbax, not with unroll."""
import pathlib
import subprocess

import numpy as np
import ml_dtypes
import orbax.checkpoint as ocp
import pytest
import tensorstore as ts

import maxtext_fixtures as mf
import reference
from test_unroll import checkpoint_dir, run_unroll

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "data" / "example"


def verify(unroll_bin, scanned, unrolled, *extra):
    return subprocess.run([str(unroll_bin), "verify", str(scanned), str(unrolled), *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def example_out(unroll_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("example")
    res = subprocess.run([str(unroll_bin), str(EXAMPLE / "unroll.yml"), "-q",
                          f"load_full_state_path={EXAMPLE / 'checkpoints' / '9' / 'items'}",
                          f"base_output_directory={out}", "run_name=run", "force_unroll=true",
                          "checkpoint_storage_use_ocdbt=false"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return EXAMPLE / "checkpoints" / "9" / "items", out / "run" / "checkpoints" / "0" / "items"


def test_verify_example_ok(unroll_bin, example_out):
    scanned, unrolled = example_out
    res = verify(unroll_bin, scanned, unrolled)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 elements differ: OK" in res.stdout
    # with the config (checks num_decoder_layers too), and with a wrong layer count
    assert verify(unroll_bin, scanned, unrolled, EXAMPLE / "unroll.yml").returncode == 0
    bad = verify(unroll_bin, scanned, unrolled, "num_decoder_layers=4")
    assert bad.returncode == 6 and "expected 4 layers" in bad.stdout, bad.stdout


@pytest.mark.parametrize("pure_nnx", [True, False])
@pytest.mark.parametrize("kind,layout,dtype", [
    ("linen", "ocdbt-zarr3", "float32"), ("nnx", "plain-zarr2", "bfloat16"),
    ("nnx_legacy", "ocdbt-zarr3", "float32"), ("params", "ocdbt-zarr2", "float32"),
    ("deepseek", "ocdbt-zarr3", "bfloat16"), ("deepseek", "plain-zarr3", "float32")])
def test_verify_passes_on_good_outputs(unroll_bin, make_fixture, tmp_path, kind, layout, dtype,
                                       pure_nnx):
    info = make_fixture(kind, layout, dtype)
    res = run_unroll(unroll_bin, info, tmp_path, pure_nnx=pure_nnx)
    assert res.returncode == 0, res.stderr
    v = verify(unroll_bin, info.items, checkpoint_dir(tmp_path) / "0" / "items")
    assert v.returncode == 0, v.stdout + v.stderr
    assert "FAILED" not in v.stdout


def test_verify_passes_on_lora_adapters(unroll_bin, make_fixture, tmp_path):
    base = make_fixture("linen", "ocdbt-zarr3", "float32")
    lora = make_fixture("lora", "ocdbt-zarr3", "float32")
    res = run_unroll(unroll_bin, base, tmp_path, pure_nnx=False,
                     extra=[f"lora_input_adapters_path={lora.root}"])
    assert res.returncode == 0, res.stderr
    ckpt = checkpoint_dir(tmp_path)
    assert verify(unroll_bin, base.items, ckpt / "base" / "0" / "items").returncode == 0
    for lora_id in lora.adapters:
        v = verify(unroll_bin, lora.root / lora_id / "0" / "items",
                   ckpt / "loras" / lora_id / "0" / "items")
        assert v.returncode == 0, v.stdout + v.stderr


def _write_one_element(items, name, index, value):
    """Overwrite one element of a plain-zarr3 output array with TensorStore."""
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                  "path": str(items / name)}}).result()
    arr[index].write(np.asarray(value, dtype=arr.dtype.numpy_dtype)).result()


def test_verify_catches_a_corrupted_chunk(unroll_bin, example_out, tmp_path):
    scanned, good = example_out
    bad = tmp_path / "bad"
    import shutil
    shutil.copytree(good.parent.parent, bad)
    items = bad / "0" / "items"
    name = "decoder.layers_1.mlp.wi_0.kernel.value"
    assert (items / name / "zarr.json").is_file(), sorted(p.name for p in items.iterdir())
    old = reference.restore(items)["decoder"]["layers_1"]["mlp"]["wi_0"]["kernel"]["value"]
    new = ml_dtypes.bfloat16(float(old[5, 2]) + 1.0)
    _write_one_element(items, name, (5, 2), new)
    res = verify(unroll_bin, scanned, items)
    assert res.returncode == 6, res.stdout + res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("mismatch: leaf 'decoder/layers_1/mlp/wi_0/kernel' index [5, 2]"), first
    assert "decoder/layers/mlp/wi_0/kernel[layer 1 of 3, axis 1]" in first, first
    assert "1 elements differ" in res.stdout
    assert "decoder/layers_1/mlp/wi_0/kernel" in res.stderr


def _resave(tree, path):
    ocp.PyTreeCheckpointer().save(path, tree)
    return path


@pytest.fixture(scope="module")
def restored_example(example_out):
    return reference.restore(example_out[1])


def test_verify_catches_a_missing_leaf(unroll_bin, example_out, restored_example, tmp_path):
    tree = restored_example
    tree = {**tree, "decoder": {**tree["decoder"]}}
    tree["decoder"]["layers_2"] = {**tree["decoder"]["layers_2"]}
    del tree["decoder"]["layers_2"]["mlp"]
    res = verify(unroll_bin, example_out[0], _resave(tree, tmp_path / "missing"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "missing: leaf 'decoder/layers_2/mlp/wi_0/kernel'" in res.stdout, res.stdout
    assert "missing: leaf 'decoder/layers_2/mlp/wo/kernel'" in res.stdout, res.stdout


def test_verify_catches_a_missing_layer(unroll_bin, example_out, restored_example, tmp_path):
    tree = {**restored_example, "decoder": {**restored_example["decoder"]}}
    del tree["decoder"]["layers_2"]
    res = verify(unroll_bin, example_out[0], _resave(tree, tmp_path / "nolayer"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "shape: leaf 'decoder/layers_0/" in res.stdout, res.stdout  # no axis of length 2


def test_verify_catches_an_extra_leaf(unroll_bin, example_out, restored_example, tmp_path):
    tree = {**restored_example}
    tree["extra_head"] = {"kernel": {"value": np.zeros((2, 2), ml_dtypes.bfloat16)}}
    res = verify(unroll_bin, example_out[0], _resave(tree, tmp_path / "extra"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert res.stdout.startswith("extra: leaf 'extra_head/kernel'"), res.stdout
    # an extra layer: no input axis has 4 layers
    tree = {**restored_example, "decoder": {**restored_example["decoder"]}}
    tree["decoder"]["layers_3"] = tree["decoder"]["layers_0"]
    res = verify(unroll_bin, example_out[0], _resave(tree, tmp_path / "extra_layer"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "less an axis of length 4" in res.stdout, res.stdout


def test_verify_catches_wrong_dtype(unroll_bin, example_out, restored_example, tmp_path):
    tree = {**restored_example, "decoder": {**restored_example["decoder"]}}
    norm = tree["decoder"]["decoder_norm"]["scale"]["value"]
    tree["decoder"]["decoder_norm"] = {"scale": {"value": np.asarray(norm, np.float32)}}
    res = verify(unroll_bin, example_out[0], _resave(tree, tmp_path / "dtype"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "dtype: leaf 'decoder/decoder_norm/scale': expected bfloat16, got float32" in res.stdout


def test_verify_unrolled_against_itself_is_not_ok(unroll_bin, example_out):
    """The input is not an unrolled output (opt_state, float32): verify must fail."""
    res = verify(unroll_bin, example_out[0], example_out[0])
    assert res.returncode == 6


def test_verify_usage_and_io_errors(unroll_bin, example_out, tmp_path):
    res = subprocess.run([str(unroll_bin), "verify", str(example_out[0])], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    res = verify(unroll_bin, example_out[0], tmp_path / "nothing")
    assert res.returncode == 3, res.stderr
    res = verify(unroll_bin, example_out[0], example_out[1], "bogus=1")
    assert res.returncode == 2, res.stderr


@pytest.fixture(scope="module")
def pipe_out(unroll_bin, fixture_cache, tmp_path_factory):
    """pipe_scanned_repeats ([repeats 2, stages 2, ..., layers_per_stage 3 at axis 3, ...] +
    2 layers outside the pipeline) unrolled by unroll, and its restored output."""
    import layout_fixtures as lf
    info = lf.make_pipe_checkpoint("pipe_scanned_repeats", "ocdbt-zarr3", "float32",
                                   fixture_cache)
    out = tmp_path_factory.mktemp("pipe")
    res = subprocess.run([str(unroll_bin), str(EXAMPLE / "unroll.yml"), "-q", *info.overrides(),
                          f"base_output_directory={out}", "run_name=run", "force_unroll=true"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    items = out / "run" / "checkpoints" / "0" / "items"
    return info, items, reference.restore(items)


def test_verify_pipeline_ok_and_layer_count(unroll_bin, pipe_out):
    info, items, _ = pipe_out
    res = verify(unroll_bin, info.items, items, EXAMPLE / "unroll.yml", *info.overrides())
    assert res.returncode == 0, res.stdout + res.stderr
    bad = verify(unroll_bin, info.items, items, "num_decoder_layers=13")
    assert bad.returncode == 6 and "expected 13 layers" in bad.stdout, bad.stdout


def test_verify_pipeline_catches_swapped_layers(unroll_bin, pipe_out, tmp_path):
    """Stage order vs repeat order: layers 3 (r0, s1, j0) and 6 (r1, s0, j0) swapped."""
    info, _, tree = pipe_out
    tree = {**tree, "decoder": {**tree["decoder"]}}
    d = tree["decoder"]
    d["layers_3"], d["layers_6"] = d["layers_6"], d["layers_3"]
    res = verify(unroll_bin, info.items, _resave(tree, tmp_path / "swapped"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "mismatch: leaf 'decoder/layers_3/" in res.stdout, res.stdout
    assert "pipeline_module/layers/scanned_layers/" in res.stdout, res.stdout
    assert "[0, 1, 0 on axes 0, 1, 3]" in res.stdout, res.stdout


def test_verify_pipeline_catches_missing_layers(unroll_bin, pipe_out, tmp_path):
    info, _, tree = pipe_out
    tree = {**tree, "decoder": {**tree["decoder"]}}
    del tree["decoder"]["layers_5"]  # from the stack
    del tree["decoder"]["layers_13"]  # the last layer outside the pipeline
    res = verify(unroll_bin, info.items, _resave(tree, tmp_path / "missing"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "missing: leaf 'decoder/layers_5/mlp/wi_0/kernel' (source: decoder/pipeline_module/" \
        "layers/scanned_layers/mlp/wi_0/kernel)" in res.stdout, res.stdout
    # layers_outside_pipeline's count is read from its own layer axis (2 layers), so its
    # missing layer is named as such
    assert "missing: leaf 'decoder/layers_13/mlp/wi_0/kernel' (source: decoder/" \
        "layers_outside_pipeline/mlp/wi_0/kernel)" in res.stdout, res.stdout


def test_verify_gemma4_catches_swapped_and_missing_layers(unroll_bin, fixture_cache, tmp_path):
    import layout_fixtures as lf
    info = lf.make_gemma4_checkpoint("ocdbt-zarr3", "float32", fixture_cache)
    out = tmp_path / "out"
    res = subprocess.run([str(unroll_bin), str(EXAMPLE / "unroll.yml"), "-q", *info.overrides(),
                          f"base_output_directory={out}", "run_name=run", "force_unroll=true"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    items = out / "run" / "checkpoints" / "0" / "items"
    assert verify(unroll_bin, info.items, items).returncode == 0
    tree = reference.restore(items)
    # the last local layer of block 0 and its global layer swapped
    t1 = {**tree, "decoder": {**tree["decoder"]}}
    d = t1["decoder"]
    d["layers_4"], d["layers_5"] = d["layers_5"], d["layers_4"]
    res = verify(unroll_bin, info.items, _resave(t1, tmp_path / "swapped"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "mismatch: leaf 'decoder/layers_4/" in res.stdout, res.stdout
    assert "scanned_blocks/local_layers/" in res.stdout and "[0, 4 on axes 1, 2]" in res.stdout
    # a local layer of block 1 missing
    t2 = {**tree, "decoder": {**tree["decoder"]}}
    del t2["decoder"]["layers_8"]
    res = verify(unroll_bin, info.items, _resave(t2, tmp_path / "missing"))
    assert res.returncode == 6, res.stdout + res.stderr
    assert "missing: leaf 'decoder/layers_8/mlp/wi_0/kernel' (source: decoder/scanned_blocks/" \
        "local_layers/mlp/wi_0/kernel)" in res.stdout, res.stdout
