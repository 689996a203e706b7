"""The C config loader over MaxText's own configs (from the `maxtext` wheel on PyPI).

Each case runs the test-only program `config_tool config <config.yml> key=value ...` and compares
the merged config it prints with a reference computed here the way
src/maxtext/configs/pyconfig.py computes it (OmegaConf's YAML loader = PyYAML SafeLoader + an
extra float resolver - timestamps; base_config chains; model file merge with conflict check;
logical_axis_rules merged by rule name; "none" -> None), and the derived settings with
types.py's rules.

Environment: UNROLL_BUILD_DIR (default /work/main/build or <repo>/build) for config_tool,
UNROLL_FIXTURE_CACHE for the downloaded configs (tests/interop/get_maxtext_configs.sh).
"""
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _build_dir() -> pathlib.Path:
    env = os.environ.get("UNROLL_BUILD_DIR")
    if env:
        return pathlib.Path(env)
    for cand in (pathlib.Path("/work/main/build"), ROOT / "build"):
        if (cand / "tests" / "unit" / "config" / "config_tool").is_file():
            return cand
    return ROOT / "build"


@pytest.fixture(scope="session")
def config_tool() -> pathlib.Path:
    path = _build_dir() / "tests" / "unit" / "config" / "config_tool"
    if not path.is_file():
        pytest.fail(f"config_tool not found at {path}: build the config room's tests first")
    return path


def _configs_dir(cache: pathlib.Path) -> pathlib.Path:
    dest = cache / "maxtext"
    pip = os.environ.get("PIP") or str(pathlib.Path(sys.executable).parent / "pip")
    env = dict(os.environ, PIP=pip)
    out = subprocess.run(
        [str(ROOT / "tests" / "interop" / "get_maxtext_configs.sh"), str(dest)],
        check=True, capture_output=True, text=True, env=env)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def configs(fixture_cache) -> pathlib.Path:
    return _configs_dir(fixture_cache)


def _model_files():
    # Parametrize over the model files of the downloaded package; collected lazily so that a
    # missing download fails the fixture, not the collection.
    cache = pathlib.Path(os.environ.get("UNROLL_FIXTURE_CACHE", ROOT / "build" / "fixtures"))
    try:
        d = _configs_dir(cache)
    except Exception:  # reported by the `configs` fixture in every test instead
        return ["<download failed>"]
    return sorted(p.stem for p in (d / "models").glob("*.yml"))


# ---- the reference: pyconfig's semantics in Python ----------------------------------------

def _loader():
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:
         [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
        list("-+0123456789."),
    )
    Loader.yaml_implicit_resolvers = {
        k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
        for k, v in Loader.yaml_implicit_resolvers.items()
    }
    return Loader


LOADER = _loader()


def _load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=LOADER) or {}


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        if isinstance(out.get(k), dict) and isinstance(v, dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _find_up(directory, rel):
    d = directory
    while True:
        cand = os.path.join(d, rel)
        if os.path.isfile(cand):
            return cand
        if d in ("", "/"):
            return None
        d = os.path.dirname(d)


def _load_chain(path):
    cfg = _load(path)
    if "base_config" in cfg:
        parent = _find_up(os.path.dirname(path), cfg["base_config"])
        cfg = _merge(_load_chain(parent), cfg)
    return cfg


def _merge_rules(base, new, replace):
    if replace:
        return list(new)
    if not new:
        return base
    names = {r[0] for r in new}
    return [r for r in base if r[0] not in names] + list(new)


def reference(config_path, overrides):
    base = _load_chain(str(config_path))
    cli = {}
    for arg in overrides:
        k, _, v = arg.partition("=")
        cli[k] = yaml.load(v, Loader=LOADER)
    temp = _merge(base, cli)
    if not temp.get("base_output_directory"):
        cli["base_output_directory"] = os.path.abspath("maxtext_output")
    temp = _merge(base, cli)
    model_name = temp.get("model_name", "default").replace("-Instruct", "")
    model = {}
    if model_name != "default":
        model = _load(_find_up(os.path.dirname(str(config_path)), f"models/{model_name}.yml"))
        if temp.get("override_model_config"):
            model = {k: v for k, v in model.items() if k not in cli}
    rules = _merge_rules(base.get("logical_axis_rules", []), model.get("logical_axis_rules", []),
                         bool(model.get("override_logical_axis_rules")))
    rules = _merge_rules(rules, cli.get("logical_axis_rules", []),
                         bool(cli.get("override_logical_axis_rules")))
    final = _merge(_merge(base, model), cli)
    final["logical_axis_rules"] = rules
    for k, v in final.items():
        if isinstance(v, str) and v.lower() == "none":
            final[k] = None
    return final


def layers(base_layers, scale):
    layer_scale = math.floor(math.log2(scale)) // 3
    return (2 ** layer_scale) * base_layers


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def run_tool(config_tool, config, *overrides, cwd=None):
    return subprocess.run([str(config_tool), "config", str(config), *overrides],
                          capture_output=True, text=True, cwd=cwd,
                          env={k: v for k, v in os.environ.items() if not k.startswith("M_")})


def load_ok(config_tool, config, *overrides, cwd=None):
    res = run_tool(config_tool, config, *overrides, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def assert_config_matches(got, want):
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"missing {missing[:10]}, extra {extra[:10]}"
    bad = [k for k in want if not _same(got[k], want[k])]
    assert not bad, {k: (got[k], want[k]) for k in bad[:10]}


# ---- tests --------------------------------------------------------------------------------

def test_base_yml_loads_as_pyconfig_reads_it(config_tool, configs, tmp_path):
    base = configs / "base.yml"
    got = load_ok(config_tool, base, cwd=tmp_path)
    with_cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        want = reference(base, [])
    finally:
        os.chdir(with_cwd)
    assert len(want) > 500
    assert_config_matches(got["config"], want)
    s = got["settings"]
    assert s["base_output_directory"] == str(tmp_path / "maxtext_output")
    assert s["run_name"].startswith("default_")
    assert s["checkpoint_dir"] == f"{tmp_path}/maxtext_output/{s['run_name']}/checkpoints/"
    assert s["num_decoder_layers"] == want["base_num_decoder_layers"]
    assert s["param_scan_axis"] == want["param_scan_axis"]
    assert s["scan_layers"] is want["scan_layers"]
    assert s["checkpoint_storage_target_data_file_size_bytes"] == \
        want["checkpoint_storage_target_data_file_size_bytes"]
    assert [r[0] for r in s["logical_axis_rules"]] == [r[0] for r in want["logical_axis_rules"]]
    # the layer axis goes to the `stage` mesh axis under MaxText's rules
    assert ["layers", ["stage"]] in s["logical_axis_rules"]


@pytest.mark.parametrize("model", _model_files())
def test_every_model_file(config_tool, configs, model, tmp_path):
    base = configs / "base.yml"
    args = [f"model_name={model}", "force_unroll=true", "base_output_directory=/o", "run_name=r"]
    got = load_ok(config_tool, base, *args)
    want = reference(base, args)
    assert_config_matches(got["config"], want)
    s = got["settings"]
    assert s["num_decoder_layers"] == layers(want["base_num_decoder_layers"],
                                             want["global_parameter_scale"])
    assert s["first_num_dense_layers"] == want["first_num_dense_layers"]
    assert s["decoder_block"] == want["decoder_block"]
    assert s["force_unroll"] is True
    assert s["checkpoint_dir"] == "/o/r/checkpoints/"
    assert s["logical_axis_rules"] == [
        [r[0], [r[1]] if isinstance(r[1], str) else list(r[1] or [])]
        for r in want["logical_axis_rules"]]


def test_configs_with_base_config_chains(config_tool, configs):
    chained = [p for p in sorted(configs.rglob("*.yml"))
               if "models" not in p.relative_to(configs).parts
               and re.search(r"^base_config:", p.read_text(), re.M)]
    assert len(chained) > 10
    for path in chained:
        args = ["base_output_directory=/o", "run_name=r"]
        res = run_tool(config_tool, path, *args)
        assert res.returncode == 0, f"{path}: {res.stderr}"
        assert_config_matches(json.loads(res.stdout)["config"], reference(path, args))


def test_yaml_typed_overrides(config_tool, configs):
    got = load_ok(config_tool, configs / "base.yml", "learning_rate=1e-3", "param_scan_axis=0",
                  "scan_layers=False", "run_name='007'", "mesh_axes=[data, fsdp]",
                  "load_full_state_path=gs://b/c/5/items", "global_parameter_scale=8",
                  "base_output_directory=/o")
    c, s = got["config"], got["settings"]
    assert c["learning_rate"] == 1e-3 and isinstance(c["learning_rate"], float)
    assert c["param_scan_axis"] == 0 and s["param_scan_axis"] == 0
    assert c["scan_layers"] is False and s["scan_layers"] is False
    assert c["run_name"] == "007"
    assert c["mesh_axes"] == ["data", "fsdp"]
    assert s["load_full_state_path"] == "gs://b/c/5/items"
    assert s["num_decoder_layers"] == 2 * c["base_num_decoder_layers"]
    assert s["checkpoint_dir"] == "/o/007/checkpoints/"


def test_unknown_key_exits_2_naming_it(config_tool, configs):
    res = run_tool(config_tool, configs / "base.yml", "force_unroll=true", "no_such_key_x=1")
    assert res.returncode == 2
    assert "'no_such_key_x'" in res.stderr


def test_model_file_conflict(config_tool, configs):
    base = configs / "base.yml"
    model = _load(configs / "models" / "llama2-7b.yml")
    emb = model["base_emb_dim"]
    res = run_tool(config_tool, base, "model_name=llama2-7b", f"base_emb_dim={emb + 1}")
    assert res.returncode == 2
    assert "base_emb_dim" in res.stderr and "override_model_config" in res.stderr
    # the same value is no conflict; override_model_config lets the command line win
    load_ok(config_tool, base, "model_name=llama2-7b", f"base_emb_dim={emb}")
    got = load_ok(config_tool, base, "model_name=llama2-7b", "override_model_config=true",
                  f"base_emb_dim={emb + 1}", "base_num_decoder_layers=2")
    assert got["config"]["base_emb_dim"] == emb + 1
    assert got["settings"]["num_decoder_layers"] == 2


def test_invalid_combinations_exit_2(config_tool, configs):
    base = configs / "base.yml"
    for args, needle in [
        (["load_full_state_path=a", "load_parameters_path=b"], "At most one of"),
        (["global_parameter_scale=3"], "power of two"),
        (["model_name=no-such-model"], "no-such-model"),
        (["force_unroll=maybe"], "force_unroll"),
    ]:
        res = run_tool(config_tool, base, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert needle in res.stderr, (args, res.stderr)
