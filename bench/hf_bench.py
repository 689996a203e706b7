"""MaxText's Hugging Face exporter against `unroll to_huggingface` on a Llama 3.1-shaped model
trained by real MaxText (bench/README.md, "The Hugging Face export"). Runs in .venv-maxtext
(Python 3.12, maxtext 0.2.5):

    UNROLL_BIN=build/src/cli/unroll .venv-maxtext/bin/python bench/hf_bench.py \
        --workdir <dir with ~4 GiB free> [--layers 26] [--dtype bfloat16]

1. trains a llama3.1-style model (emb 1024, 8 heads of 128, MLP 4096, --layers layers: 436M
   parameters at 26) 2 steps with MaxText, cached as tests/maxtext/driver.py caches;
2. makes the exporters' input with unroll: the parameters only, scanned, bfloat16 (MaxText's
   exporter reads no training state);
3. reads that input once (the page cache is then warm for both alike), then times under
   /usr/bin/time -v, one run each, in this order:
     maxtext  python -m maxtext.checkpoint_conversion.to_huggingface
     unroll   $UNROLL_BIN to_huggingface with the same config and keys
4. checks that both folders hold the same tensors, byte for byte;
5. prints wall time, CPU time and peak RSS of each and the ratios, and writes
   <workdir>/hf_bench.json.
Exit status non-zero if a tool fails or the folders differ."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import struct
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import maxtext_bench  # noqa: E402  (tests/maxtext/driver.py on the path, its environment set)
from maxtext_bench import driver, timed, warm  # noqa: E402


def model(layers: int) -> list:
    return ["model_name=llama3.1-8b", "override_model_config=true", "base_emb_dim=1024",
            "base_num_query_heads=8", "base_num_kv_heads=8", "head_dim=128",
            "base_mlp_dim=4096", f"base_num_decoder_layers={layers}"]


def tensors(folder: pathlib.Path) -> dict:
    """name -> (file, dtype, shape, start, end) of every tensor in a folder's shards."""
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                s, e = v["data_offsets"]
                out[k] = (f, v["dtype"], v["shape"], 8 + n + s, 8 + n + e)
    return out


def differences(a: pathlib.Path, b: pathlib.Path) -> tuple[int, list]:
    """(tensors compared, names that differ in dtype, shape or bytes, or are in one only)."""
    ta, tb = tensors(a), tensors(b)
    differ = sorted(set(ta) ^ set(tb))
    for k in sorted(set(ta) & set(tb)):
        fa, da, sa, oa, ea = ta[k]
        fb, db, sb, ob, eb = tb[k]
        if (da, sa, ea - oa) != (db, sb, eb - ob):
            differ.append(k)
            continue
        with open(fa, "rb") as x, open(fb, "rb") as y:
            x.seek(oa)
            y.seek(ob)
            left = ea - oa
            while left > 0:
                n = min(left, 1 << 24)
                if x.read(n) != y.read(n):
                    differ.append(k)
                    break
                left -= n
    return len(set(ta) & set(tb)), differ


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, type=pathlib.Path)
    ap.add_argument("--layers", type=int, default=26)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    a = ap.parse_args()
    unroll = os.environ.get("UNROLL_BIN") or str(HERE.parent / "build" / "src" / "cli" / "unroll")
    if not os.access(unroll, os.X_OK) or not os.access("/usr/bin/time", os.X_OK):
        raise SystemExit("hf_bench: needs UNROLL_BIN (the built unroll) and /usr/bin/time")
    family = f"bench-llama3.1-1024x{a.layers}"
    driver.ALL[family] = model(a.layers)
    items = driver.train(family)
    for step in items.parent.parent.iterdir():  # keep the cache to the one step used
        if step.name != items.parent.name and step.name.isdigit():
            shutil.rmtree(step)
    a.workdir.mkdir(parents=True, exist_ok=True)
    out = a.workdir / "hf_bench"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    keys = [*model(a.layers), *driver.COMMON]
    params = timed([unroll, "-q", driver.BASE_YML, f"load_full_state_path={items}",
                    f"base_output_directory={out}", "run_name=params", "force_unroll=false",
                    *keys], out / "params.log")
    if params["rc"] != 0:
        raise SystemExit(f"hf_bench: making the param-only input failed, see {params['log']}")
    src = out / "params" / "checkpoints" / "0" / "items"
    export = [driver.BASE_YML, f"load_parameters_path={src}", "scan_layers=true",
              f"weight_dtype={a.dtype}", *keys, "--override_model_architecture",
              f"--hf_model_path={driver.hf_tokenizer()}"]
    input_bytes = warm(src)
    runs = {"maxtext": timed([sys.executable, "-m",
                              "maxtext.checkpoint_conversion.to_huggingface",
                              *export, f"base_output_directory={out / 'maxtext'}"],
                             out / "maxtext.log")}
    warm(src)
    runs["unroll"] = timed([unroll, "to_huggingface", "-q", *export,
                            f"base_output_directory={out / 'unroll'}"], out / "unroll.log")
    failed = [k for k, r in runs.items() if r["rc"] != 0]
    if failed:
        raise SystemExit(f"hf_bench: {', '.join(failed)} failed, see {out}")
    n, differ = differences(out / "unroll", out / "maxtext")
    folder_bytes = sum(p.stat().st_size for p in (out / "unroll").glob("*.safetensors"))
    m, u = runs["maxtext"], runs["unroll"]
    result = {"maxtext": driver.maxtext.__version__, "layers": a.layers, "dtype": a.dtype,
              "input_bytes": input_bytes, "folder_bytes": folder_bytes, "runs": runs,
              "tensors_compared": n, "differences": differ,
              "wall_ratio": m["wall_s"] / u["wall_s"],
              "rss_ratio": m["peak_rss_bytes"] / u["peak_rss_bytes"]}
    (a.workdir / "hf_bench.json").write_text(json.dumps(result, indent=1))
    print(f"maxtext {result['maxtext']}, llama3.1 1024x{a.layers}: {input_bytes / 1e9:.2f} GB "
          f"param-only input, {folder_bytes / 1e9:.2f} GB {a.dtype} folder (page cache warm)")
    print(f"{'':10}{'wall s':>9}{'cpu s':>9}{'peak RSS':>12}")
    for name, r in runs.items():
        print(f"{name:10}{r['wall_s']:9.2f}{r['cpu_s']:9.2f}{r['peak_rss_bytes'] / 2**20:9.0f} MiB")
    print(f"MaxText / unroll: wall x{result['wall_ratio']:.1f}, peak RSS x{result['rss_ratio']:.1f}; "
          f"{n} tensors compared, {'byte for byte equal' if not differ else 'DIFFERENT'}")
    shutil.rmtree(out, ignore_errors=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
