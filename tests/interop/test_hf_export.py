"""`unroll to_huggingface` on checkpoints written by real Orbax (maxtext_fixtures), against the
real safetensors library: the folder's shard is byte for byte the file `safetensors` writes for
the tensors computed here from the fixture's values (the oracle: each layer's slice, MaxText's
exporter's transforms in numpy and torch), in float32 and bfloat16, from scanned full states,
param-only checkpoints and every storage layout; and the folder is published as unroll's other
outputs are: whole or not at all (killed runs leave nothing a loader would take), a rerun
replaces it, inputs and outputs that overlap are refused, so are models the export does not map,
and a bucket destination gets the same bytes, the file that names the weights last.

The safetensors library and torch live in the Hugging Face client's venv (.venv-hf,
$UNROLL_HF_PYTHON); this file runs in the interop venv."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
import uuid

import ml_dtypes
import numpy as np
import pytest

import maxtext_fixtures
import s3_fixtures
from test_destination import _gdb
from test_kill import BIG, _cached_fixture, _delays, _kill_at

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "data" / "example" / "unroll.yml"
HF_PYTHON = os.environ.get("UNROLL_HF_PYTHON", str(ROOT / ".venv-hf" / "bin" / "python"))

# Writes the expected folder's shard with the safetensors library, from an .npz of the final
# values (bfloat16 ones as their bits in int16: torch's own float -> bfloat16 rounding of NaNs
# differs from JAX's, and MaxText's exporter's values come from JAX).
EXPECTED = r'''
import sys, numpy as np, torch
from safetensors.torch import save_file
arrays, dtype, out = np.load(sys.argv[1]), sys.argv[2], sys.argv[3]
tensors = {}
for name in arrays.files:
    t = torch.from_numpy(np.ascontiguousarray(arrays[name]))
    tensors[name] = t.view(torch.bfloat16) if dtype == "bfloat16" else t
save_file(tensors, out, metadata={"format": "pt"})
'''


def hf_args(info, items, out, *extra):
    cfg = info.config
    return [str(CONFIG), f"{info.input_key}={items}", f"base_output_directory={out}",
            f"base_num_decoder_layers={cfg['num_decoder_layers']}",
            f"param_scan_axis={cfg['param_scan_axis']}", f"pure_nnx={str(cfg['pure_nnx']).lower()}",
            f"checkpoint_storage_use_ocdbt={str(info.use_ocdbt).lower()}",
            f"checkpoint_storage_use_zarr3={str(info.use_zarr3).lower()}", *extra]


def run_hf(unroll_bin, info, items, out, *extra, env=None, timeout=300):
    return subprocess.run([str(unroll_bin), "to_huggingface", *hf_args(info, items, out, *extra)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def _params(tree: dict) -> dict:
    """The model's parameters (below params/params/, or the NNX value leaves) of a fixture."""
    t = tree["params"]["params"] if "params" in tree.get("params", {}) else tree.get(
        "params", tree.get("model", tree))

    def unwrap(x):
        if isinstance(x, dict):
            if set(x) == {"value"}:
                return x["value"]
            return {k: unwrap(v) for k, v in x.items()}
        return x
    return unwrap(t)


def expected_tensors(info) -> tuple[dict, dict]:
    """The Llama folder's tensors (in the checkpoint's dtype, before the cast) and the query's
    scales: every layer's slice of the scanned parameters, rearranged as LlamaForCausalLM
    holds them."""
    p = _params(info.tree)
    dec, axis = p["decoder"], info.param_scan_axis
    out, scales = {}, {}
    out["model.embed_tokens.weight"] = np.asarray(p["token_embedder"]["embedding"])
    out["model.norm.weight"] = np.asarray(dec["decoder_norm"]["scale"])
    if "logits_dense" in dec:
        out["lm_head.weight"] = np.asarray(dec["logits_dense"]["kernel"]).T
    layers = dec["layers"]
    for i in range(info.num_decoder_layers):
        def take(x, rank_after):
            x = np.asarray(x)
            ax = axis if x.ndim > axis and x.ndim - 1 == rank_after else 0
            return np.take(x, i, axis=ax)
        a = layers["self_attention"]
        pre = f"model.layers.{i}."
        q = take(a["query"]["kernel"], 3)  # [emb, heads, head_dim]
        out[pre + "self_attn.q_proj.weight"] = q.reshape(q.shape[0], -1).T
        scales[pre + "self_attn.q_proj.weight"] = float(np.float32(np.sqrt(q.shape[-1])))
        for n, hf in (("key", "k_proj"), ("value", "v_proj")):
            k = take(a[n]["kernel"], 3)
            out[pre + f"self_attn.{hf}.weight"] = k.reshape(k.shape[0], -1).T
        o = take(a["out"]["kernel"], 3)  # [heads, head_dim, emb]
        out[pre + "self_attn.o_proj.weight"] = o.reshape(-1, o.shape[-1]).T
        m = layers["mlp"]
        out[pre + "mlp.gate_proj.weight"] = take(m["wi_0"]["kernel"], 2).T
        out[pre + "mlp.up_proj.weight"] = take(m["wi_1"]["kernel"], 2).T
        out[pre + "mlp.down_proj.weight"] = take(m["wo"]["kernel"], 2).T
        out[pre + "input_layernorm.weight"] = take(
            layers["pre_self_attention_layer_norm"]["scale"], 1)
        out[pre + "post_attention_layernorm.weight"] = take(
            layers["post_self_attention_layer_norm"]["scale"], 1)
    return out, scales


def final_values(tensors: dict, scales: dict, dtype: str) -> dict:
    """The values MaxText's exporter writes: each tensor cast to the weight dtype first (it
    restores in weight_dtype), then multiplied by its scale in float32 and rounded back."""
    dt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
    out = {}
    for name, t in tensors.items():
        with np.errstate(all="ignore"):  # the fixtures hold NaNs and infinities
            v = np.asarray(t).astype(dt)
            if name in scales:
                v = (v.astype(np.float32) * np.float32(scales[name])).astype(dt)
        out[name] = v.view(np.int16) if dtype == "bfloat16" else v
    return out


def library_file(tmp_path, tensors: dict, scales: dict, dtype: str) -> bytes:
    npz = tmp_path / f"expected-{dtype}.npz"
    np.savez(npz, **final_values(tensors, scales, dtype))
    out = tmp_path / f"expected-{dtype}.safetensors"
    p = subprocess.run([HF_PYTHON, "-c", EXPECTED, str(npz), dtype, str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out.read_bytes()


@pytest.mark.parametrize("layout", tuple(maxtext_fixtures.LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_shard_is_the_librarys(unroll_bin, make_fixture, tmp_path, layout, dtype):
    """The folder's one shard is what the safetensors library writes for the expected tensors,
    byte for byte (names, order, header, padding, values)."""
    info = make_fixture("linen", layout, "float32")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf", f"weight_dtype={dtype}", "-q")
    assert res.returncode == 0, res.stderr
    tensors, scales = expected_tensors(info)
    got = (tmp_path / "hf" / "model.safetensors").read_bytes()
    assert got == library_file(tmp_path, tensors, scales, dtype)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["dtype"] == dtype
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json",
                                                                   "model.safetensors"]


def test_param_only_and_bf16_input(unroll_bin, make_fixture, tmp_path):
    """A param-only checkpoint of bfloat16 values (what unroll itself writes) exports too."""
    info = make_fixture("linen", maxtext_fixtures.DEFAULT_LAYOUT, "bfloat16")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf", "weight_dtype=bfloat16", "-q")
    assert res.returncode == 0, res.stderr
    tensors, scales = expected_tensors(info)
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == library_file(
        tmp_path, tensors, scales, "bfloat16")


def test_shards_and_index(unroll_bin, make_fixture, tmp_path):
    """--max_shard_size cuts the folder into numbered shards and an index naming every tensor,
    each tensor once, the total its size."""
    info = make_fixture("linen")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf", "--max_shard_size=1K", "-q")
    assert res.returncode == 0, res.stderr
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    shards = sorted({v for v in index["weight_map"].values()})
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    tensors, _ = expected_tensors(info)
    assert sorted(index["weight_map"]) == sorted(tensors)
    assert index["metadata"]["total_size"] == sum(t.size * 4 for t in tensors.values())
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == sorted(
        ["config.json", "model.safetensors.index.json", *shards])


def run_verify(unroll_bin, info, out, *extra, env=None):
    """unroll verify <input> <folder> with the config and overrides the export was given."""
    return subprocess.run([str(unroll_bin), "verify", str(info.items), str(out),
                           *hf_args(info, info.items, out, *extra)],
                          capture_output=True, text=True, timeout=300, env=env)


def _tensor_span(folder: pathlib.Path, name: str) -> tuple[pathlib.Path, int, int]:
    """The shard holding tensor `name`, and its bytes' absolute offsets there."""
    index = folder / "model.safetensors.index.json"
    shard = folder / (json.loads(index.read_text())["weight_map"][name] if index.exists()
                      else "model.safetensors")
    b = shard.read_bytes()
    n = int.from_bytes(b[:8], "little")
    s, e = json.loads(b[8:8 + n])[name]["data_offsets"]
    return shard, 8 + n + s, 8 + n + e


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_verify_accepts_the_export_and_names_a_changed_tensor(unroll_bin, make_fixture,
                                                              tmp_path, dtype):
    """unroll verify of the folder against the training state it came from: every tensor
    checked (exit 0); one element of one tensor changed in its shard: exit 6 naming that
    tensor and the element; the wrong weight_dtype: exit 6, every tensor's dtype named."""
    info = make_fixture("linen")
    out = tmp_path / "hf"
    res = run_hf(unroll_bin, info, info.items, out, f"weight_dtype={dtype}",
                 "--max_shard_size=1K", "-q")
    assert res.returncode == 0, res.stderr
    tensors, _ = expected_tensors(info)
    total = sum(t.size for t in tensors.values())
    # whole tensors, and pieces of 64 bytes (every tensor compared in several)
    for env in (None, {**os.environ, "UNROLL_VERIFY_PIECE_BYTES": "64"}):
        ok = run_verify(unroll_bin, info, out, f"weight_dtype={dtype}", env=env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert f"{len(tensors)} arrays and {total} elements compared, 0 elements differ: OK" \
            in ok.stdout
    other = run_verify(unroll_bin, info, out,
                       "weight_dtype=" + ("bfloat16" if dtype == "float32" else "float32"))
    assert other.returncode == 6 and other.stdout.count("dtype: leaf") >= 1, other.stdout
    name = "model.layers.1.self_attn.q_proj.weight"
    shard, begin, end = _tensor_span(out, name)
    b = bytearray(shard.read_bytes())
    item = 4 if dtype == "float32" else 2
    at = begin + 5 * item  # element [0, 5]
    b[at:at + item] = bytes(x ^ 0x5A for x in b[at:at + item])
    shard.write_bytes(bytes(b))
    bad = run_verify(unroll_bin, info, out, f"weight_dtype={dtype}",
                     env={**os.environ, "UNROLL_VERIFY_PIECE_BYTES": "64"})
    assert bad.returncode == 6, bad.stdout + bad.stderr
    assert f"mismatch: leaf '{name}' index [0, 5]" in bad.stdout, bad.stdout
    assert "1 elements differ: FAILED" in bad.stdout
    assert name in bad.stderr and bad.stderr.count("\n") == 1


def test_verify_finds_a_missing_and_a_foreign_tensor(unroll_bin, make_fixture, tmp_path):
    """A folder whose shard lacks one tensor and holds another model's: both named, exit 6."""
    info = make_fixture("linen")
    out = tmp_path / "hf"
    assert run_hf(unroll_bin, info, info.items, out, "-q").returncode == 0
    st = out / "model.safetensors"
    b = st.read_bytes()
    n = int.from_bytes(b[:8], "little")
    header = json.loads(b[8:8 + n])
    header["model.layers.9.mlp.up_proj.weight"] = header.pop("model.layers.0.mlp.up_proj.weight")
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    st.write_bytes(len(text).to_bytes(8, "little") + text + b[8 + n:])
    res = run_verify(unroll_bin, info, out)
    assert res.returncode == 6, res.stdout + res.stderr
    assert "missing: leaf 'model.layers.0.mlp.up_proj.weight'" in res.stdout, res.stdout
    assert "extra: leaf 'model.layers.9.mlp.up_proj.weight'" in res.stdout, res.stdout


def test_dry_run_writes_nothing(unroll_bin, make_fixture, tmp_path):
    info = make_fixture("linen")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf", "-n")
    assert res.returncode == 0, res.stderr
    assert "model.layers.0.self_attn.q_proj.weight" in res.stdout
    assert "LlamaForCausalLM" in res.stdout
    assert not (tmp_path / "hf").exists() and list(tmp_path.iterdir()) == []


def test_replaces_the_folder_whole(unroll_bin, make_fixture, tmp_path):
    """An earlier folder is replaced whole (a file it had and the new one lacks is gone), and
    nothing is left beside it."""
    info = make_fixture("linen")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "model-00001-of-00009.safetensors").write_bytes(b"stale")
    (tmp_path / "neighbour.txt").write_text("keep")
    res = run_hf(unroll_bin, info, info.items, out, "-q")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "neighbour.txt"]
    assert (tmp_path / "neighbour.txt").read_text() == "keep"


def _folder(d: pathlib.Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.is_dir() else {}


def test_killed_runs_publish_whole_folders(fixture_cache, unroll_bin, tmp_path):
    """SIGKILL at moments spread over a run of the larger fixture of test_kill.py: the folder
    is after each the earlier one or the complete new one, never a mix; a clean run then
    publishes it and clears what the killed runs left beside it."""
    info = _cached_fixture(fixture_cache, BIG, "kill")
    good_dir = tmp_path / "good"
    t = time.monotonic()
    res = run_hf(unroll_bin, info, info.items, good_dir, "-q")
    duration = time.monotonic() - t
    assert res.returncode == 0, res.stderr
    good = _folder(good_dir)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{\"earlier\": true}")
    earlier = _folder(out)
    args = [str(unroll_bin), "to_huggingface", *hf_args(info, info.items, out, "-q")]
    outcomes = {"earlier": 0, "new": 0}
    for i, delay in enumerate(_delays(duration, 12, seed=4)):
        _kill_at(args, delay)
        now = _folder(out)
        assert now in (earlier, good), f"kill at {delay:.3f}s left {sorted(now)}"
        outcomes["earlier" if now == earlier else "new"] += 1
        if now == good:
            shutil.rmtree(out)
            out.mkdir()
            (out / "config.json").write_text("{\"earlier\": true}")
    assert outcomes["earlier"] > 0, outcomes
    res = run_hf(unroll_bin, info, info.items, out, "-q")
    assert res.returncode == 0, res.stderr
    assert _folder(out) == good
    assert sorted(x.name for x in tmp_path.iterdir()) == ["good", "hf"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_publishes_nothing(unroll_bin, make_fixture, tmp_path, sig):
    """The signal arrives as the conversion starts (delivered by gdb): exit 128 + signal, one
    line, the earlier folder as it was, nothing left beside it."""
    info = make_fixture("linen")
    out = tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{\"earlier\": true}")
    status, text = _gdb([unroll_bin, "to_huggingface", *hf_args(info, info.items, out, "-q")],
                        f"break ur_exec_run_sink\nrun\ndelete\nsignal {sig.name}\n", tmp_path)
    assert status == 128 + sig, text
    lines = [line for line in text.splitlines() if line.startswith("unroll: ")]
    assert len(lines) == 1 and sig.name in lines[0], text
    assert _folder(out) == {"config.json": b"{\"earlier\": true}"}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["gdb.cmds", "hf"]


@pytest.mark.parametrize("case,status,words", [
    ("inside-input", 2, "inside the input"),
    ("hf-model-path", 2, "not a local folder"),
    ("scheme", 2, "unsupported URL scheme"),
    ("weight-dtype", 2, "weight_dtype"),
])
def test_refused(unroll_bin, make_fixture, tmp_path, case, status, words):
    info = make_fixture("linen")
    out = tmp_path / "hf"
    extra = []
    if case == "inside-input":
        out = info.items / "hf"
    elif case == "hf-model-path":
        extra = [f"--hf_model_path={tmp_path / 'missing'}"]
    elif case == "scheme":
        out = "ftp://host/hf"
    elif case == "weight-dtype":
        extra = ["weight_dtype=int8"]
    res = run_hf(unroll_bin, info, info.items, out, *extra)
    assert res.returncode == status, res.stderr
    assert words in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not (info.items / "hf").exists()


def test_unmapped_model_exit_5(unroll_bin, make_fixture, tmp_path):
    """A model the export does not map: exit 5, one line naming it; nothing written (the
    fixture's DeepSeek settings are not V3's: no sigmoid router, no low-rank query)."""
    info = make_fixture("deepseek")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf",
                 f"first_num_dense_layers={info.first_num_dense_layers}", "decoder_block=deepseek")
    assert res.returncode == 5, res.stderr
    assert "deepseek" in res.stderr and res.stderr.count("\n") == 1
    assert "no place in DeepseekV3ForCausalLM" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []


def _gemma2_params(tmp_path) -> tuple[pathlib.Path, dict]:
    """A scanned param-only gemma2 checkpoint written by Orbax: two MaxText layers (pairs of a
    local and a global layer), the embedding padded to 256128 rows as MaxText pads Gemma's."""
    E, H, D, M, L = 8, 2, 4, 16, 2
    b = maxtext_fixtures._Builder("hf-gemma2", "float32", maxtext_fixtures.DEFAULT_MESH)
    params: dict = {}

    def add(path, logical, shape, axis=None):
        if axis is not None:  # the layer axis at param_scan_axis 1
            logical, shape = logical[:1] + ("layers",) + logical[1:], shape[:1] + (L,) + shape[1:]
        maxtext_fixtures._set(params, path, b.array(("params", "params") + path, logical, shape,
                                                        axis))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (256128, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    for half in ("local", "global"):
        lay = ("decoder", "layers")
        for n in ("pre_self_attention_norm", "post_self_attention_norm", "pre_ffw_norm",
                  "post_ffw_norm"):
            add(lay + (f"{n}_{half}", "scale"), ("norm",), (E,), 1)
        for n in ("query", "key", "value"):
            add(lay + (f"self_attention_{half}", n, "kernel"), ("embed", "q_heads", "kv"),
                (E, H, D), 1)
        add(lay + (f"self_attention_{half}", "out", "kernel"), ("heads", "kv", "embed"),
            (H, D, E), 1)
        for n, lg, sh in (("wi_0", ("embed", "mlp"), (E, M)), ("wi_1", ("embed", "mlp"), (E, M)),
                          ("wo", ("mlp", "embed"), (M, E))):
            add(lay + (f"mlp_{half}", n, "kernel"), lg, sh, 1)
    root = tmp_path / "gemma2"
    maxtext_fixtures._save(root / "checkpoints", 0, {"params": {"params": params}}, b.specs,
                           maxtext_fixtures.DEFAULT_MESH, True, True,
                           maxtext_fixtures.MAXTEXT_CHUNK_BYTES)
    return root / "checkpoints" / "0" / "items", params


def test_gemma2_vocabulary_trimmed_and_pairs_split(unroll_bin, tmp_path):
    """gemma2: MaxText's 256128-row embedding becomes Gemma's 256000 rows, divided by the
    float32 root of the width as jax divides (times the reciprocal); each MaxText layer's
    local half is layer 2i, its global half 2i + 1, norms minus one, the query times
    sqrt(head_dim)."""
    items, params = _gemma2_params(tmp_path)
    out = tmp_path / "hf"
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(CONFIG), f"load_parameters_path={items}",
         f"base_output_directory={out}", "decoder_block=gemma2", "base_num_decoder_layers=2", "param_scan_axis=1", "-q"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    got = _safetensors(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Gemma2ForCausalLM"] and cfg["vocab_size"] == 256000
    assert cfg["num_hidden_layers"] == 4 and cfg["query_pre_attn_scalar"] == 4
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"] * 2
    emb = np.asarray(params["token_embedder"]["embedding"], np.float32)
    with np.errstate(all="ignore"):
        want = emb[:256000] * np.float32(np.float32(1) / np.float32(np.sqrt(8)))
    assert got["model.embed_tokens.weight"].shape == (256000, 8)
    assert got["model.embed_tokens.weight"].tobytes() == want.tobytes()
    lay = params["decoder"]["layers"]
    for i in range(2):
        for half, hf in (("local", 2 * i), ("global", 2 * i + 1)):
            pre = f"model.layers.{hf}."
            with np.errstate(all="ignore"):
                norm = np.asarray(lay[f"pre_ffw_norm_{half}"]["scale"])[:, i] - np.float32(1)
                q = np.asarray(lay[f"self_attention_{half}"]["query"]["kernel"])[:, i]
                q = q.reshape(8, -1).T * np.float32(2)
            assert got[pre + "pre_feedforward_layernorm.weight"].tobytes() == norm.tobytes()
            assert got[pre + "self_attn.q_proj.weight"].tobytes() == q.tobytes()
    assert len(got) == 2 + 4 * 11  # 4 norms, 4 attention and 3 MLP kernels a layer
    # unroll verify checks the cut vocabulary and the pairs too; a row past the cut is absent
    args = [str(CONFIG), "decoder_block=gemma2", "base_num_decoder_layers=2", "param_scan_axis=1"]
    ok = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "0 elements differ: OK" in ok.stdout, ok.stdout + ok.stderr


def _safetensors(path: pathlib.Path) -> dict:
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            assert v["dtype"] == "F32"
            out[k] = np.frombuffer(b[8 + n + s:8 + n + e], np.float32).reshape(v["shape"])
    return out


def test_tokenizer_copied(unroll_bin, make_fixture, tmp_path):
    info = make_fixture("linen")
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{\"model\": {}}")
    (tok / "tokenizer_config.json").write_text("{}")
    (tok / "model.safetensors").write_bytes(b"not copied")
    res = run_hf(unroll_bin, info, info.items, tmp_path / "hf", f"--hf_model_path={tok}", "-q")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "hf" / "tokenizer.json").read_text() == "{\"model\": {}}"
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


# ---- buckets (SeaweedFS, faults from a proxy in front of it) ----------------------------------

BUCKET = "unroll-hf"
s3 = s3_fixtures.server_fixture(BUCKET)


@pytest.fixture(scope="module")
def proxy(s3):
    p = s3_fixtures.FaultProxy(s3.port, stall_s=6.0)
    yield p
    p.stop()


def _fresh(name: str) -> str:
    return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"


def _bucket_folder(s3, url: str, tmp_path) -> dict:
    local = tmp_path / f"down-{uuid.uuid4().hex[:6]}"
    keys = s3.download_tree(BUCKET, url[len(f"s3://{BUCKET}/"):], local)
    return {k: (local / k).read_bytes() for k in keys}


@pytest.fixture(scope="module")
def local_export(make_fixture, unroll_bin, tmp_path_factory):
    """The folder a local run makes of the linen fixture, in shards (the bytes a bucket run
    must make too)."""
    info = make_fixture("linen")
    out = tmp_path_factory.mktemp("hf-local") / "hf"
    tok = out.parent / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{\"model\": {}}")
    res = run_hf(unroll_bin, info, info.items, out, "--max_shard_size=1K", f"--hf_model_path={tok}",
                 "-q")
    assert res.returncode == 0, res.stderr
    return {"info": info, "files": _folder(out), "tok": tok}


def test_bucket_output_is_the_local_folder_index_last(unroll_bin, s3, proxy, local_export,
                                                      tmp_path):
    """Local input -> bucket: the objects are the local folder's files byte for byte, and the
    index naming the weights goes up after every shard, the tokenizer and the config."""
    info, out = local_export["info"], _fresh("l2b")
    proxy.reset()
    res = run_hf(unroll_bin, info, info.items, out, "--max_shard_size=1K",
                 f"--hf_model_path={local_export['tok']}", "-q",
                 env=s3.env(endpoint=proxy.endpoint))
    assert res.returncode == 0, res.stderr
    assert _bucket_folder(s3, out, tmp_path) == local_export["files"]
    ok = run_verify(unroll_bin, info, out, env=s3.env())
    assert ok.returncode == 0 and "0 elements differ: OK" in ok.stdout, ok.stdout + ok.stderr
    puts = [path.rsplit("/", 1)[1].split("?")[0] for method, path, _, _ in proxy.served
            if method in ("PUT", "POST") and "uploadId" not in path]
    written = [p for p in puts if p in local_export["files"]]
    assert sorted(set(written)) == sorted(local_export["files"]), puts
    assert written[-1] == "model.safetensors.index.json", written
    shards = [i for i, p in enumerate(written) if p.startswith("model-")]
    assert max(shards) < written.index("tokenizer.json") < written.index("config.json")


def test_bucket_input_and_output(unroll_bin, s3, local_export, tmp_path):
    """Bucket -> local and bucket -> bucket give the same folder; a second run onto the
    bucket folder is refused (exit 2, the objects untouched) unless --replace."""
    info = local_export["info"]
    prefix = f"in-{uuid.uuid4().hex[:8]}/checkpoints"
    assert s3.upload_tree(info.root, BUCKET, prefix) > 0
    src = f"s3://{BUCKET}/{prefix}/{info.step}/items"
    env = s3.env()
    extra = ("--max_shard_size=1K", f"--hf_model_path={local_export['tok']}", "-q")
    res = run_hf(unroll_bin, info, src, tmp_path / "hf", *extra, env=env)
    assert res.returncode == 0, res.stderr
    assert _folder(tmp_path / "hf") == local_export["files"]
    out = _fresh("b2b")
    res = run_hf(unroll_bin, info, src, out, *extra, env=env)
    assert res.returncode == 0, res.stderr
    before = _bucket_folder(s3, out, tmp_path)
    assert before == local_export["files"]
    res = run_hf(unroll_bin, info, src, out, *extra, env=env)
    assert res.returncode == 2 and "--replace" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert _bucket_folder(s3, out, tmp_path) == before
    res = run_hf(unroll_bin, info, src, out, *extra, "--replace", env=env)
    assert res.returncode == 0, res.stderr
    assert _bucket_folder(s3, out, tmp_path) == local_export["files"]


def test_bucket_upload_failure_publishes_nothing(unroll_bin, s3, proxy, local_export):
    """PUTs fail for good half-way: exit 3, one line, and the folder's prefix holds nothing
    (what went up is deleted, the index never written)."""
    info, out = local_export["info"], _fresh("putfail")
    puts = {"n": 0}

    def every_put_after_the_third(method, path):
        if method != "PUT":
            return False
        puts["n"] += 1
        return puts["n"] > 3

    proxy.reset(["503"] * 100, match=every_put_after_the_third)
    res = run_hf(unroll_bin, info, info.items, out, "--max_shard_size=1K", "-q",
                 env=s3.env(endpoint=proxy.endpoint, UNROLL_HTTP_RETRIES="2"))
    proxy.reset()
    assert res.returncode == 3, res.stderr
    assert "nothing published" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert s3.list(BUCKET, out[len(f"s3://{BUCKET}/"):]) == []


def _gemma4_params(tmp_path, layers: int, no_value: int = -1) -> tuple[pathlib.Path, dict]:
    """An unscanned param-only dense gemma4 checkpoint written by Orbax: every sixth layer a
    global one with its own head dim and key heads and no value kernel (its key is its value,
    share_kv_projections), each layer's output scalar."""
    E, H, D, KV, GD, GKV, M = 8, 2, 4, 2, 8, 2, 16
    b = maxtext_fixtures._Builder(f"hf-gemma4-{layers}-{no_value}", "float32",
                                  maxtext_fixtures.DEFAULT_MESH)
    params: dict = {}

    def add(path, logical, shape):
        maxtext_fixtures._set(params, path, b.array(("params", "params") + path, logical, shape,
                                                        None))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (64, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    for i in range(layers):
        lay = ("decoder", f"layers_{i}")
        is_global = i % 6 == 5
        d, kv = (GD, GKV) if is_global else (D, KV)
        for n in ("pre_self_attention_norm", "post_self_attention_norm", "pre_ffw_norm",
                  "post_ffw_norm"):
            add(lay + (n, "scale"), ("norm",), (E,))
        add(lay + ("self_attention", "query_norm", "scale"), ("norm",), (d,))
        add(lay + ("self_attention", "key_norm", "scale"), ("norm",), (d,))
        add(lay + ("self_attention", "query", "kernel"), ("embed", "q_heads", "kv"), (E, H, d))
        for n in ("key",) if is_global or i == no_value else ("key", "value"):
            add(lay + ("self_attention", n, "kernel"), ("embed", "kv_heads", "kv"), (E, kv, d))
        add(lay + ("self_attention", "out", "kernel"), ("heads", "kv", "embed"), (H, d, E))
        for n, lg, sh in (("wi_0", ("embed", "mlp"), (E, M)), ("wi_1", ("embed", "mlp"), (E, M)),
                          ("wo", ("mlp", "embed"), (M, E))):
            add(lay + ("mlp", n, "kernel"), lg, sh)
        add(lay + ("layer_scalar",), (None,), (1,))  # sharding (None,), as gemma4.py
    root = tmp_path / f"gemma4-{layers}-{no_value}"
    maxtext_fixtures._save(root / "checkpoints", 0, {"params": {"params": params}}, b.specs,
                           maxtext_fixtures.DEFAULT_MESH, True, True,
                           maxtext_fixtures.MAXTEXT_CHUNK_BYTES)
    return root / "checkpoints" / "0" / "items", params


GEMMA4 = ["decoder_block=gemma4", "scan_layers=false"]


def test_gemma4_global_layers_share_key_and_value(unroll_bin, tmp_path):
    """dense gemma4: norms and layer scalars as stored, the embedding divided by the float32
    root of the width as jax divides, the global layer's key without a value, its own head dim
    and key heads in config.json; a layer count transformers would compute otherwise (its
    last layer made global) is refused, exit 5, naming why."""
    items, params = _gemma4_params(tmp_path, 6)
    out = tmp_path / "hf"
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(CONFIG), f"load_parameters_path={items}",
         f"base_output_directory={out}", "base_num_decoder_layers=6", *GEMMA4, "-q"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    got = _safetensors(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    text = cfg["text_config"]
    assert cfg["architectures"] == ["Gemma4ForConditionalGeneration"]
    assert text["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    assert (text["head_dim"], text["global_head_dim"], text["num_global_key_value_heads"],
            text["attention_k_eq_v"]) == (4, 8, 2, True)
    lm = "model.language_model."
    emb = np.asarray(params["token_embedder"]["embedding"], np.float32)
    with np.errstate(all="ignore"):
        want = emb * np.float32(np.float32(1) / np.float32(np.sqrt(8)))
    assert got[lm + "embed_tokens.weight"].tobytes() == want.tobytes()
    for i in range(6):
        lay, pre = params["decoder"][f"layers_{i}"], f"{lm}layers.{i}."
        assert got[pre + "layer_scalar"].tobytes() == np.asarray(lay["layer_scalar"]).tobytes()
        assert got[pre + "pre_feedforward_layernorm.weight"].tobytes() == \
            np.asarray(lay["pre_ffw_norm"]["scale"]).tobytes()
        k = np.asarray(lay["self_attention"]["key"]["kernel"])
        assert got[pre + "self_attn.k_proj.weight"].tobytes() == k.reshape(8, -1).T.tobytes()
        assert (pre + "self_attn.v_proj.weight" in got) == (i != 5)
    assert got[f"{lm}layers.5.self_attn.q_proj.weight"].shape == (2 * 8, 8)
    assert len(got) == 2 + 6 * 14 - 1  # 6 norms, 4 attention and 3 MLP kernels, the scalar
    args = [str(CONFIG), "base_num_decoder_layers=6", *GEMMA4]
    ok = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "0 elements differ: OK" in ok.stdout, ok.stdout + ok.stderr

    items7, _ = _gemma4_params(tmp_path, 7)
    out7 = tmp_path / "hf7"
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(CONFIG), f"load_parameters_path={items7}",
         f"base_output_directory={out7}", "base_num_decoder_layers=7", *GEMMA4, "-q"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 5, res.stderr
    assert "gemma4 with 7 layers" in res.stderr and "multiple of 6" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not out7.exists()


def test_gemma4_sliding_layer_without_value_refused(unroll_bin, tmp_path):
    """A sliding layer without its value kernel would be loaded by transformers with a made-up
    one: refused, naming the layer, nothing written."""
    items, _ = _gemma4_params(tmp_path, 6, no_value=2)
    out = tmp_path / "hf"
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(CONFIG), f"load_parameters_path={items}",
         f"base_output_directory={out}", "base_num_decoder_layers=6", *GEMMA4, "-q"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "layer 2 lacks a value kernel where its other sliding layers do" in res.stderr, \
        res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not out.exists()


def _qwen3_moe_params(tmp_path) -> tuple[pathlib.Path, dict]:
    """A scanned param-only qwen3_moe checkpoint written by Orbax: the experts' kernels
    [experts, layers, in, out] as MaxText stacks them (the layer axis at param_scan_axis 1,
    after the experts'), the router [emb, layers, experts]; small chunks, so that a chunk holds
    some experts and not others."""
    E, H, D, KV, X, M, L = 8, 2, 4, 2, 6, 4, 2
    b = maxtext_fixtures._Builder("hf-qwen3-moe", "float32", maxtext_fixtures.DEFAULT_MESH)
    params: dict = {}

    def add(path, logical, shape, axis=None):
        if axis is not None:
            logical, shape = logical[:1] + ("layers",) + logical[1:], shape[:1] + (L,) + shape[1:]
        maxtext_fixtures._set(params, path, b.array(("params", "params") + path, logical, shape,
                                                        axis))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (64, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    add(("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, 64))
    lay = ("decoder", "layers")
    for n in ("pre_self_attention_layer_norm", "post_self_attention_layer_norm"):
        add(lay + (n, "scale"), ("norm",), (E,), 1)
    for n in ("query_norm", "key_norm"):
        add(lay + ("self_attention", n, "scale"), ("norm",), (D,), 1)
    add(lay + ("self_attention", "query", "kernel"), ("embed", "q_heads", "kv"), (E, H, D), 1)
    for n in ("key", "value"):
        add(lay + ("self_attention", n, "kernel"), ("embed", "kv_heads", "kv"), (E, KV, D), 1)
    add(lay + ("self_attention", "out", "kernel"), ("heads", "kv", "embed"), (H, D, E), 1)
    add(lay + ("moe_block", "gate", "kernel"), ("embed", "exp"), (E, X), 1)
    for n, lg, sh in (("wi_0", ("exp", "embed", "mlp"), (X, E, M)),
                      ("wi_1", ("exp", "embed", "mlp"), (X, E, M)),
                      ("wo", ("exp", "mlp", "embed"), (X, M, E))):
        add(lay + ("moe_block", n), lg, sh, 1)
    root = tmp_path / "qwen3-moe"
    maxtext_fixtures._save(root / "checkpoints", 0, {"params": {"params": params}}, b.specs,
                           maxtext_fixtures.DEFAULT_MESH, True, True, 256)
    return root / "checkpoints" / "0" / "items", params


QWEN3_MOE = ["decoder_block=qwen3_moe", "base_num_decoder_layers=2", "param_scan_axis=1"]
# MaxText's keys of a Qwen3-MoE model the example config does not have
QWEN3_MOE_YML = """
num_experts: 6
num_experts_per_tok: 2
norm_topk_prob: true
use_qk_norm: true
logits_via_embedding: false
base_mlp_dim: 12
"""


def test_qwen3_moe_experts_cut_one_tensor_each(unroll_bin, tmp_path):
    """qwen3_moe: each routed expert's kernels a tensor of their own (the expert's slice of
    MaxText's [experts, layers, in, out] array, transposed), the router transposed, the sizes in
    config.json from the shapes; unroll verify checks every expert's tensor against its slice
    and names one changed."""
    items, params = _qwen3_moe_params(tmp_path)
    out = tmp_path / "hf"
    config = tmp_path / "qwen3-moe.yml"
    config.write_text(CONFIG.read_text() + QWEN3_MOE_YML)
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(config), f"load_parameters_path={items}",
         f"base_output_directory={out}", *QWEN3_MOE, "-q"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    got = _safetensors(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["model_type"] == "qwen3_moe"
    assert (cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"],
            cfg["intermediate_size"], cfg["norm_topk_prob"], cfg["mlp_only_layers"]) == \
        (6, 2, 4, 24, True, [])  # intermediate_size: mlp_dim x experts a token (Qwen3's)
    lay = params["decoder"]["layers"]
    for i in range(2):
        pre = f"model.layers.{i}.mlp."
        gate = np.asarray(lay["moe_block"]["gate"]["kernel"])[:, i]
        assert got[pre + "gate.weight"].tobytes() == gate.T.tobytes()
        for n, hf in (("wi_0", "gate_proj"), ("wi_1", "up_proj"), ("wo", "down_proj")):
            w = np.asarray(lay["moe_block"][n])[:, i]
            for e in range(6):
                t = got[f"{pre}experts.{e}.{hf}.weight"]
                assert t.tobytes() == np.ascontiguousarray(w[e].T).tobytes(), (i, n, e)
    assert not any(".mlp.gate_proj" in k for k in got)
    assert len(got) == 3 + 2 * (8 + 1 + 3 * 6)  # 4 norms, 4 attention kernels, router, experts
    args = [str(config), *QWEN3_MOE]
    for env in (None, {**os.environ, "UNROLL_VERIFY_PIECE_BYTES": "16"}):
        ok = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                            capture_output=True, text=True, timeout=300, env=env)
        assert ok.returncode == 0 and "0 elements differ: OK" in ok.stdout, ok.stdout + ok.stderr
    name = "model.layers.1.mlp.experts.4.down_proj.weight"
    shard, begin, _ = _tensor_span(out, name)
    b = bytearray(shard.read_bytes())
    b[begin + 4 * 3:begin + 4 * 4] = bytes(x ^ 0x5A for x in b[begin + 4 * 3:begin + 4 * 4])
    shard.write_bytes(bytes(b))
    bad = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 6, bad.stdout + bad.stderr
    assert f"mismatch: leaf '{name}' index [0, 3]" in bad.stdout, bad.stdout
    assert "1 elements differ: FAILED" in bad.stdout


def _gpt_oss_params(tmp_path) -> tuple[pathlib.Path, dict]:
    """A scanned param-only gpt-oss checkpoint written by Orbax: blocks of 2 layers
    (decoder/layers/layers_0, layers_1, each stacked over 2 blocks on param_scan_axis 1), the
    experts' kernels [experts, blocks, in, out] and biases [experts, blocks, mlp]; chunks of
    256 bytes, so that the gate's and the up projection's chunks interleave into the same
    stretches of gate_up_proj from different threads."""
    E, H, D, KV, X, M, B = 8, 2, 4, 2, 6, 4, 2
    b = maxtext_fixtures._Builder("hf-gpt-oss", "float32", maxtext_fixtures.DEFAULT_MESH)
    params: dict = {}

    def add(path, logical, shape, axis=None):
        if axis is not None:
            logical, shape = logical[:1] + ("layers",) + logical[1:], shape[:1] + (B,) + shape[1:]
        maxtext_fixtures._set(params, path, b.array(("params", "params") + path, logical, shape,
                                                        axis))

    add(("token_embedder", "embedding"), ("vocab", "embed_vocab"), (64, E))
    add(("decoder", "decoder_norm", "scale"), ("norm",), (E,))
    add(("decoder", "logits_dense", "kernel"), ("embed_vocab", "vocab"), (E, 64))
    for k in range(2):
        lay = ("decoder", "layers", f"layers_{k}")
        att, mlp = lay + ("GptOssAttention",), lay + ("GptOssMlp",)
        for n in ("pre_self_attention_layer_norm", "post_self_attention_layer_norm"):
            add(lay + (n, "scale"), ("norm",), (E,), 1)
        add(att + ("query", "kernel"), ("embed", "q_heads", "kv"), (E, H, D), 1)
        add(att + ("query", "bias"), ("q_heads", "kv"), (H, D), 1)
        for n in ("key", "value"):
            add(att + (n, "kernel"), ("embed", "kv_heads", "kv"), (E, KV, D), 1)
            add(att + (n, "bias"), ("kv_heads", "kv"), (KV, D), 1)
        add(att + ("out", "kernel"), ("heads", "kv", "embed"), (H, D, E), 1)
        add(att + ("out", "bias"), ("embed",), (E,), 1)
        add(att + ("sinks",), ("q_heads",), (H,), 1)
        add(mlp + ("gate", "kernel"), ("embed", "exp"), (E, X), 1)
        add(mlp + ("gate", "bias"), ("exp",), (X,), 1)
        for n in ("wi_0", "wi_1"):
            add(mlp + (n,), ("exp", "embed", "mlp"), (X, E, M), 1)
            add(mlp + (n + "_bias",), ("exp", "mlp"), (X, M), 1)
        add(mlp + ("wo",), ("exp", "mlp", "embed"), (X, M, E), 1)
        add(mlp + ("wo_bias",), ("exp", "embed"), (X, E), 1)
    root = tmp_path / "gpt-oss"
    maxtext_fixtures._save(root / "checkpoints", 0, {"params": {"params": params}}, b.specs,
                           maxtext_fixtures.DEFAULT_MESH, True, True, 256)
    return root / "checkpoints" / "0" / "items", params


GPT_OSS = ["decoder_block=gpt_oss", "base_num_decoder_layers=4", "param_scan_axis=1",
           "inhomogeneous_layer_cycle_interval=2"]
# MaxText's keys of a gpt-oss model the example config does not have
GPT_OSS_YML = """
num_experts: 6
num_experts_per_tok: 2
attention_sink: true
mlp_activations_limit: 7.0
rope_type: yarn
rope_attention_scaling: true
logits_via_embedding: false
"""


def _raw_tensors(path: pathlib.Path) -> dict:
    """name -> (safetensors dtype, shape, bytes)."""
    b = path.read_bytes()
    n = int.from_bytes(b[:8], "little")
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpt_oss_gate_and_up_interleaved(unroll_bin, tmp_path, dtype):
    """gpt-oss: the gate and up kernels (and biases) of each layer interleaved into one tensor,
    gate_up_proj[..., ::2] = wi_0 and [..., 1::2] = wi_1 (MaxText's exporter's `interleave`),
    written from chunks of each as they come; the experts stacked, not cut; the blocks' layers
    in order (layers_k's block j is layer 2j + k); the YaRN scaling kept. unroll verify checks
    both parts and names the parameter of a changed element of either."""
    items, params = _gpt_oss_params(tmp_path)
    out = tmp_path / "hf"
    config = tmp_path / "gpt-oss.yml"
    config.write_text(CONFIG.read_text() + GPT_OSS_YML)
    args = [str(config), *GPT_OSS, f"weight_dtype={dtype}"]
    res = subprocess.run(
        [str(unroll_bin), "to_huggingface", str(config), f"load_parameters_path={items}",
         f"base_output_directory={out}", *GPT_OSS, f"weight_dtype={dtype}", "-q"],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    got = _raw_tensors(out / "model.safetensors")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["GptOssForCausalLM"] and cfg["model_type"] == "gpt_oss"
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"],
            cfg["layer_types"], cfg["swiglu_limit"]) == \
        (6, 2, 4, ["sliding_attention", "full_attention"] * 2, 7.0)
    assert cfg["rope_parameters"]["rope_type"] == "yarn"
    assert "attention_factor" not in cfg["rope_parameters"]  # YaRN's own: MaxText scales
    dt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
    st = {"float32": "F32", "bfloat16": "BF16"}[dtype]

    def want(a):
        return np.ascontiguousarray(np.asarray(a).astype(dt)).tobytes()

    for i in range(4):
        blk = params["decoder"]["layers"][f"layers_{i % 2}"]["GptOssMlp"]
        pre = f"model.layers.{i}.mlp.experts."
        for hf, mt in (("gate_up_proj", ""), ("gate_up_proj_bias", "_bias")):
            w0 = np.asarray(blk["wi_0" + mt])[:, i // 2]
            w1 = np.asarray(blk["wi_1" + mt])[:, i // 2]
            fused = np.empty(w0.shape[:-1] + (2 * w0.shape[-1],), np.float32)
            fused[..., ::2], fused[..., 1::2] = w0, w1
            assert got[pre + hf][:2] == (st, list(fused.shape)), (i, hf)
            assert got[pre + hf][2] == want(fused), (i, hf)
        assert got[pre + "down_proj"][2] == want(np.asarray(blk["wo"])[:, i // 2])
        assert got[pre + "down_proj_bias"][2] == want(np.asarray(blk["wo_bias"])[:, i // 2])
    assert len(got) == 3 + 4 * (2 + 9 + 2 + 4)  # norms, attention, router, experts
    for env in (None, {**os.environ, "UNROLL_VERIFY_PIECE_BYTES": "16"}):
        ok = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                            capture_output=True, text=True, timeout=300, env=env)
        assert ok.returncode == 0 and "0 elements differ: OK" in ok.stdout, ok.stdout + ok.stderr
    name = "model.layers.3.mlp.experts.gate_up_proj"
    shard, begin, _ = _tensor_span(out, name)
    item = 4 if dtype == "float32" else 2
    b = bytearray(shard.read_bytes())
    for at in (5, 6):  # [0, 0, 5]: wi_1's; [0, 0, 6]: wi_0's
        b[begin + item * at] ^= 0x5A
    shard.write_bytes(bytes(b))
    bad = subprocess.run([str(unroll_bin), "verify", str(items), str(out), *args],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 6, bad.stdout + bad.stderr
    assert f"mismatch: leaf '{name}' index [0, 0, 5]" in bad.stdout, bad.stdout
    assert f"mismatch: leaf '{name}' index [0, 0, 6]" in bad.stdout, bad.stdout
    assert "GptOssMlp/wi_1 of" in bad.stdout and "GptOssMlp/wi_0 of" in bad.stdout, bad.stdout
    assert "2 elements differ: FAILED" in bad.stdout
