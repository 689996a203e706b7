"""The command line: flags, bad configs and bad inputs, each with its exit status and a
one-line message that names what is wrong (README, "Exit statuses")."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("UNROLL_BIN", ROOT / "build" / "src" / "cli" / "unroll")).resolve()
EXAMPLE = ROOT / "tests" / "data" / "example"
CONFIG = EXAMPLE / "unroll.yml"
ITEMS = EXAMPLE / "checkpoints" / "9" / "items"


def run(*args, cwd=None):
    if not BIN.is_file():
        pytest.fail(f"unroll binary not found at {BIN}")
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def one_line_error(res, *words):
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("unroll: "), lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_help_and_version():
    res = run("--help")
    assert res.returncode == 0 and "usage: unroll" in res.stdout
    assert "exit status" in res.stdout
    res = run("--version")
    assert res.returncode == 0 and res.stdout.startswith("unroll ")


def test_no_arguments_is_usage_error():
    res = run()
    assert res.returncode == 2 and "usage: unroll" in res.stderr


@pytest.mark.parametrize("args,words", [
    (["--frobnicate", CONFIG], ["--frobnicate"]),
    (["--threads", "0", CONFIG], ["thread"]),
    (["--memory-limit", "lots", CONFIG], ["--memory-limit"]),
    ([CONFIG, "not_a_pair"], ["not_a_pair"]),
])
def test_bad_flags(args, words):
    res = run(*args)
    assert res.returncode == 2
    one_line_error(res, *words)


@pytest.mark.parametrize("args,words", [
    (["--frobnicate", CONFIG], ["--frobnicate", "to_huggingface --help"]),
    (["-j", "0", CONFIG], ["thread"]),
    (["--memory-limit", "lots", CONFIG], ["--memory-limit"]),
    (["--max_shard_size", "big", CONFIG], ["--max_shard_size"]),
    (["--hf_model_path=", CONFIG], ["--hf_model_path"]),
    ([CONFIG, "not_a_pair"], ["not_a_pair"]),
    ([CONFIG, "--resume"], ["--resume"]),  # the conversion's own options are not its
])
def test_to_huggingface_bad_flags(args, words):
    res = run("to_huggingface", *args)
    assert res.returncode == 2
    one_line_error(res, *words)


def test_to_huggingface_help_and_usage():
    res = run("to_huggingface", "--help")
    assert res.returncode == 0 and "usage: unroll to_huggingface" in res.stdout
    res = run("to_huggingface")
    assert res.returncode == 2 and "usage: unroll to_huggingface" in res.stderr


def test_unknown_config_key_is_rejected_with_its_name(tmp_path):
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "no_such_key=1")
    assert res.returncode == 2
    one_line_error(res, "no_such_key")
    assert not any(tmp_path.iterdir())


def test_missing_config_file():
    res = run("/nonexistent/base.yml")
    assert res.returncode == 2
    one_line_error(res, "/nonexistent/base.yml")


def test_invalid_yaml(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("run_name: [unclosed\n")
    res = run(bad)
    assert res.returncode == 2
    one_line_error(res, "bad.yml")


def test_no_input_path():
    res = run(CONFIG)
    assert res.returncode == 2
    one_line_error(res, "load_full_state_path")


def test_both_input_paths():
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"load_parameters_path={ITEMS}")
    assert res.returncode == 2
    one_line_error(res, "load_parameters_path")


def test_missing_input_checkpoint(tmp_path):
    res = run(CONFIG, f"load_full_state_path={tmp_path}/nothing",
              f"base_output_directory={tmp_path}/out", "force_unroll=true")
    assert res.returncode == 3
    one_line_error(res, "nothing")
    assert not (tmp_path / "out").exists()


def test_empty_directory_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    res = run(CONFIG, f"load_full_state_path={tmp_path}/empty",
              f"base_output_directory={tmp_path}/out", "force_unroll=true")
    assert res.returncode in (3, 4)
    one_line_error(res, "empty")


def test_param_only_checkpoint_as_full_state_is_refused(tmp_path):
    # First make a param-only (Linen decode) checkpoint from the example, then feed it back
    # as load_full_state_path: MaxText refuses a training state without opt_state.
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "run_name=a", "force_unroll=true", "pure_nnx=false", "-q")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "a" / "checkpoints" / "0" / "items"
    res = run(CONFIG, f"load_full_state_path={out}", f"base_output_directory={tmp_path}",
              "run_name=b", "force_unroll=true")
    assert res.returncode == 2
    one_line_error(res, "opt_state")
    # ... and load_parameters_path takes it (scan_layers=false: it is already unscanned).
    res = run(CONFIG, f"load_parameters_path={out}", f"base_output_directory={tmp_path}",
              "run_name=c", "scan_layers=false", "pure_nnx=false", "-q")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "c" / "checkpoints" / "0" / "items" / "_METADATA").is_file()


def test_wrong_layer_count_names_leaf_shape_axis_and_expected(tmp_path):
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "force_unroll=true", "base_num_decoder_layers=4")
    assert res.returncode == 2
    line = one_line_error(res, "axis 1", "expected 4", "shape [8, 3, ", "has length 3")
    assert "params/params/decoder/layers/" in line
    assert not any(tmp_path.iterdir())


def test_enable_checkpointing_false_writes_nothing(tmp_path):
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "force_unroll=true", "enable_checkpointing=false")
    assert res.returncode == 2
    one_line_error(res, "enable_checkpointing")
    assert not any(tmp_path.iterdir())


def test_default_output_directory_and_run_name(tmp_path):
    # Empty base_output_directory -> ./maxtext_output; empty run_name -> <model>_<date>.
    res = run(CONFIG, f"load_full_state_path={ITEMS}", "force_unroll=true", "-q", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    runs = list((tmp_path / "maxtext_output").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("default_")
    assert (runs[0] / "checkpoints" / "0" / "items" / "manifest.ocdbt").is_file()


def test_quiet_prints_nothing_and_summary_otherwise(tmp_path):
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "run_name=q", "force_unroll=true", "-q")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "run_name=s", "force_unroll=true")
    assert res.returncode == 0
    assert "30 tensors from 12" in res.stderr


def test_ls_and_inspect_on_the_example():
    res = run("ls", ITEMS)
    assert res.returncode == 0
    assert "params.params.decoder.layers.mlp.wi_0.kernel/zarr.json" in res.stdout
    res = run("inspect", "--json", ITEMS)
    assert res.returncode == 0 and '"leaves"' in res.stdout or '"name"' in res.stdout


def test_inspect_shows_the_layer_axis_of_scanned_leaves():
    import json
    res = run("inspect", "--json", ITEMS)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    leaves = {l["name"]: l for l in doc["leaves"]}
    assert leaves["params.params.decoder.layers.mlp.wi_0.kernel"]["scan_axis"] == 1
    assert leaves["params.params.token_embedder.embedding"]["scan_axis"] is None
    res = run("inspect", ITEMS)
    assert "layer axis 1" in res.stdout


def test_destination_that_is_a_file_is_refused_not_deleted(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints"
    ckpt.parent.mkdir()
    ckpt.write_text("not a checkpoint")
    res = run(CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
              "run_name=run", "force_unroll=true")
    assert res.returncode == 3
    one_line_error(res, "not a checkpoint directory")
    assert ckpt.read_text() == "not a checkpoint"
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoints"]


def test_rerun_replaces_the_earlier_output(tmp_path):
    args = [CONFIG, f"load_full_state_path={ITEMS}", f"base_output_directory={tmp_path}",
            "run_name=run", "force_unroll=true", "-q"]
    assert run(*args).returncode == 0
    marker = tmp_path / "run" / "checkpoints" / "0" / "marker"
    marker.write_text("old")
    sibling = tmp_path / "run" / "checkpoints" / "marker"  # not written by unroll: kept
    sibling.write_text("mine")
    assert run(*args).returncode == 0
    assert not marker.exists()
    assert sibling.read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoints"]
    assert (tmp_path / "run" / "checkpoints" / "0" / "items" / "_METADATA").is_file()
