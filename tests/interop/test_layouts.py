"""`unroll` on the scanned layouts beyond decoder/layers (inhomogeneous cycles, gemma3,
deepseek4): real Orbax fixtures (layout_fixtures.py), the output restored by stock Orbax and
compared bit for bit with an independent numpy reference, its tree compared with the
scan_layers=false model's, and `unroll verify` run on it."""
import pathlib
import subprocess

import pytest

import layout_fixtures as lf
import maxtext_fixtures as mf
import reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
FAMILIES = tuple(lf.FAMILIES)


@pytest.fixture(scope="session")
def layout_config(tmp_path_factory):
    """The example config: it has the keys of MaxText's base.yml these layouts need
    (inhomogeneous_layer_cycle_interval, first_num_hash_layers)."""
    return EXAMPLE_CONFIG


@pytest.fixture(scope="session")
def make_layout(fixture_cache):
    def make(family, layout="ocdbt-zarr3", dtype="float32"):
        return lf.make_layout_checkpoint(family, layout, dtype, fixture_cache)
    return make


def run_unroll(unroll_bin, config, info, out_dir, *, pure_nnx=True, extra=()):
    use_ocdbt, use_zarr3 = mf.LAYOUTS[info.layout]
    args = [str(unroll_bin), str(config), "-q", *info.overrides(),
            f"base_output_directory={out_dir}", "run_name=run", "scan_layers=true",
            "force_unroll=true", f"pure_nnx={str(pure_nnx).lower()}",
            f"checkpoint_storage_use_ocdbt={str(use_ocdbt).lower()}",
            f"checkpoint_storage_use_zarr3={str(use_zarr3).lower()}", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def output_items(out_dir):
    return pathlib.Path(out_dir) / "run" / "checkpoints" / "0" / "items"


def _model_tree(restored: dict, pure_nnx: bool) -> dict:
    """{model path: shape} of an output checkpoint."""
    if pure_nnx:
        flat = mf.flatten(restored)
        return {p[:-1]: tuple(v.shape) for p, v in flat.items() if p[-1] == "value"}
    flat = mf.flatten(restored["params"]["params"])
    return {p: tuple(v.shape) for p, v in flat.items()}


@pytest.mark.parametrize("dtype", mf.DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_layout_unrolls_like_reference(unroll_bin, layout_config, make_layout, tmp_path, family,
                                       dtype):
    info = make_layout(family, "ocdbt-zarr3", dtype)
    res = run_unroll(unroll_bin, layout_config, info, tmp_path)
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path)
    expected = lf.reference_unroll(info, pure_nnx=True)
    reference.check_unrolled(items, expected)
    # the tree (keys and shapes) is the scan_layers=false model's
    got = _model_tree(reference.restore(items), pure_nnx=True)
    assert got == lf.unscanned_tree(info.family)
    # and the independent checker agrees
    v = subprocess.run([str(unroll_bin), "verify", str(info.items), str(items), str(layout_config),
                        *info.overrides()], capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "OK" in v.stdout


@pytest.mark.parametrize("layout", ["plain-zarr2", "ocdbt-zarr2", "plain-zarr3"])
@pytest.mark.parametrize("family", ["llama4", "gemma3", "deepseek4"])
def test_layout_storage_variants_linen_output(unroll_bin, layout_config, make_layout, tmp_path,
                                              family, layout):
    info = make_layout(family, layout, "bfloat16")
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, pure_nnx=False)
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path)
    reference.check_unrolled(items, lf.reference_unroll(info, pure_nnx=False))
    got = _model_tree(reference.restore(items), pure_nnx=False)
    assert got == lf.unscanned_tree(info.family)


def test_unscanned_tree_matches_maxtext_naming():
    """Spot checks of the derived scan_layers=false trees (MaxText _init_sequential_generic)."""
    g3 = lf.unscanned_tree(lf.FAMILIES["gemma3"])
    assert ("decoder", "layers_13", "mlp", "wo", "kernel") in g3
    assert not any(p[1] == "layers_14" for p in g3 if len(p) > 1)
    l4 = lf.unscanned_tree(lf.FAMILIES["llama4"])
    assert ("decoder", "layers_5", "moe", "wi_0") in l4  # odd layers are MoE
    assert ("decoder", "layers_6", "mlp", "wi_0", "kernel") in l4


def test_cycle_without_interval_fails_naming_leaf(unroll_bin, layout_config, make_layout,
                                                  tmp_path):
    """llama4 blocks unrolled as if K were 1: an error naming the leaf, never NaN slices."""
    info = make_layout("llama4")
    res = run_unroll(unroll_bin, layout_config, info, tmp_path,
                     extra=["inhomogeneous_layer_cycle_interval=1"])
    assert res.returncode == 2, res.stderr
    assert "decoder/layers/layers_" in res.stderr and "expected 8" in res.stderr, res.stderr
    assert not output_items(tmp_path).exists()


def test_cycle_wrong_layer_count_fails(unroll_bin, layout_config, make_layout, tmp_path):
    info = make_layout("gpt_oss")
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, extra=["base_num_decoder_layers=8"])
    assert res.returncode == 2, res.stderr
    assert "decoder/layers/layers_" in res.stderr and "expected 4" in res.stderr, res.stderr
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, extra=["base_num_decoder_layers=7"])
    assert res.returncode == 2 and "not a multiple" in res.stderr, res.stderr


def test_gemma3_wrong_remainder_fails(unroll_bin, layout_config, make_layout, tmp_path):
    info = make_layout("gemma3")
    # 13 layers: 2 blocks + 1 remainder layer, but the checkpoint has 2 remainder layers
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, extra=["base_num_decoder_layers=13"])
    assert res.returncode == 2, res.stderr
    assert "layers_remainder/layers_1" in res.stderr, res.stderr
    # 12 layers: no remainder expected
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, extra=["base_num_decoder_layers=12"])
    assert res.returncode == 2 and "layers_remainder" in res.stderr, res.stderr


def test_pipeline_stack_without_pipeline_config_fails(unroll_bin, layout_config, tmp_path,
                                                     fixture_cache):
    """decoder/pipeline_module stacks with no pipeline parallelism in the config: a usage
    error (exit 2) naming the stack, not a mis-unroll."""
    b = mf._Builder("layout-pipeline", "float32", mf.DEFAULT_MESH)
    pp = ("params", "params")
    path = ("decoder", "pipeline_module", "layers", "mlp", "wi_0", "kernel")
    params: dict = {}
    mf._set(params, path, b.array(pp + path, ("layers", None, "embed", "mlp"), (1, 2, 8, 6), 0,
                                  spec=mf.P(None, None, None, None)))
    root = tmp_path / "in" / "checkpoints"
    mf._save(root, 0, {"step": 0, "params": {"params": params}, "opt_state": {}}, b.specs,
             mf.DEFAULT_MESH, True, True, mf.MAXTEXT_CHUNK_BYTES)
    cfg_items = root / "0" / "items"
    res = subprocess.run([str(unroll_bin), str(layout_config), "-q",
                          f"load_parameters_path={cfg_items}", "base_num_decoder_layers=2",
                          f"base_output_directory={tmp_path}", "run_name=run", "force_unroll=true"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "pipeline_module" in res.stderr and "ici_pipeline_parallelism" in res.stderr


@pytest.fixture(scope="session")
def make_pipe(fixture_cache):
    def make(name, layout="ocdbt-zarr3", dtype="float32"):
        return lf.make_pipe_checkpoint(name, layout, dtype, fixture_cache)
    return make


@pytest.mark.parametrize("dtype", mf.DTYPES)
@pytest.mark.parametrize("case", tuple(lf.PIPE_CASES))
def test_pipeline_unrolls_like_reference(unroll_bin, layout_config, make_pipe, tmp_path, case,
                                         dtype):
    info = make_pipe(case, "ocdbt-zarr3", dtype)
    res = run_unroll(unroll_bin, layout_config, info, tmp_path)
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path)
    reference.check_unrolled(items, lf.pipe_reference_unroll(info, pure_nnx=True))
    got = _model_tree(reference.restore(items), pure_nnx=True)
    assert got == lf.pipe_unscanned_tree(info.case)
    v = subprocess.run([str(unroll_bin), "verify", str(info.items), str(items), str(layout_config),
                        *info.overrides()], capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "OK" in v.stdout


@pytest.mark.parametrize("layout", ["plain-zarr2", "ocdbt-zarr2"])
def test_pipeline_storage_variants_linen_output(unroll_bin, layout_config, make_pipe, tmp_path,
                                                layout):
    info = make_pipe("pipe_scanned_repeats", layout, "bfloat16")
    res = run_unroll(unroll_bin, layout_config, info, tmp_path, pure_nnx=False)
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path)
    reference.check_unrolled(items, lf.pipe_reference_unroll(info, pure_nnx=False))


def test_pipeline_global_order():
    """(r * S + s) * lps + j: repeat-major, then stage, then the stage's own layers."""
    c = lf.PIPE_CASES["pipe_scanned_repeats"]
    order = [lf.pipe_global_layer(c, r, s, j)
             for r in range(c.repeats) for s in range(c.stages) for j in range(c.lps)]
    assert order == list(range(c.pipelined))
    assert lf.pipe_global_layer(c, 0, 1, 0) == 3 and lf.pipe_global_layer(c, 1, 0, 2) == 8


def test_pipeline_wrong_settings_fail(unroll_bin, layout_config, make_pipe, tmp_path):
    info = make_pipe("pipe_scanned_repeats")
    # the stage is scanned: without scan_layers_per_stage its layers_<j> are not there
    res = run_unroll(unroll_bin, layout_config, info, tmp_path,
                     extra=["scan_layers_per_stage=false"])
    assert res.returncode == 2 and "layers_0" in res.stderr, res.stderr
    # 4 stages do not fit the [2, 2, ...] stack
    res = run_unroll(unroll_bin, layout_config, info, tmp_path,
                     extra=["ici_pipeline_parallelism=4", "num_layers_per_pipeline_stage=3",
                            "pipeline_parallel_layers=12"])
    assert res.returncode == 2 and "pipeline_module" in res.stderr, res.stderr
    assert not output_items(tmp_path).exists()


@pytest.mark.parametrize("dtype", mf.DTYPES)
def test_gemma4_unrolls_like_reference(unroll_bin, layout_config, fixture_cache, tmp_path, dtype):
    """scanned_blocks/{local_layers (nested scan), global_layer} + layers_remainder."""
    info = lf.make_gemma4_checkpoint("ocdbt-zarr3", dtype, fixture_cache)
    res = run_unroll(unroll_bin, layout_config, info, tmp_path)
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path)
    reference.check_unrolled(items, lf.gemma4_reference_unroll(info, pure_nnx=True))
    got = _model_tree(reference.restore(items), pure_nnx=True)
    assert got == lf.gemma4_unscanned_tree(info.num_layers)
    v = subprocess.run([str(unroll_bin), "verify", str(info.items), str(items), str(layout_config),
                        *info.overrides()], capture_output=True, text=True, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "OK" in v.stdout


def test_gemma4_mtp_layer(unroll_bin, layout_config, fixture_cache, tmp_path):
    """Multi-token prediction: the scanned MTP layer is a whole Gemma4ScannableBlock, the
    unscanned one a single local layer, written from the block's local layer 0 (its other
    local layers and its global layer are not); scanned output: the block as it is; a block
    family whose unscanned MTP layer MaxText cannot build (gpt_oss) is refused."""
    info = lf.make_gemma4_checkpoint("ocdbt-zarr3", "float32", fixture_cache, n=6, mtp=True)
    res = run_unroll(unroll_bin, layout_config, info, tmp_path / "a")
    assert res.returncode == 0, res.stderr
    items = output_items(tmp_path / "a")
    reference.check_unrolled(items, lf.gemma4_reference_unroll(info, pure_nnx=True))
    assert _model_tree(reference.restore(items), pure_nnx=True) == \
        lf.gemma4_unscanned_tree(6, mtp=True)
    v = subprocess.run([str(unroll_bin), "verify", str(info.items), str(items), str(layout_config),
                        *info.overrides()], capture_output=True, text=True, timeout=300)
    assert v.returncode == 0 and "OK" in v.stdout, v.stdout + v.stderr
    # the dry run says what is left out
    dry = run_unroll(unroll_bin, layout_config, info, tmp_path / "d", extra=["--dry-run"])
    assert dry.returncode == 0, dry.stderr
    assert "mtp_1_transformer_layer/global_layer/mlp/wo/kernel (the scanned MTP block's global " \
        "layer" in dry.stdout, dry.stdout
    # scanned param-only output: the block unchanged
    res = run_unroll(unroll_bin, layout_config, info, tmp_path / "s", extra=["force_unroll=false"])
    assert res.returncode == 0, res.stderr
    got = _model_tree(reference.restore(output_items(tmp_path / "s")), pure_nnx=True)
    assert lf.MTP_LAYER + ("local_layers", "mlp", "wo", "kernel") in got
    # gpt_oss: refused (exit 5), nothing written
    res = run_unroll(unroll_bin, layout_config, info, tmp_path / "g",
                     extra=["decoder_block=gpt_oss", "inhomogeneous_layer_cycle_interval=6"])
    assert res.returncode == 5 and "multi-token prediction" in res.stderr, res.stderr
    assert not output_items(tmp_path / "g").exists()


def test_gemma4_linen_output_and_wrong_count(unroll_bin, layout_config, fixture_cache, tmp_path):
    info = lf.make_gemma4_checkpoint("plain-zarr2", "bfloat16", fixture_cache)
    res = run_unroll(unroll_bin, layout_config, info, tmp_path / "a", pure_nnx=False)
    assert res.returncode == 0, res.stderr
    reference.check_unrolled(output_items(tmp_path / "a"),
                             lf.gemma4_reference_unroll(info, pure_nnx=False))
    # 13 layers: 1 remainder layer expected, the checkpoint has 2
    res = run_unroll(unroll_bin, layout_config, info, tmp_path / "b",
                     extra=["base_num_decoder_layers=13"])
    assert res.returncode == 2 and "layers_remainder/local_layers" in res.stderr, res.stderr
