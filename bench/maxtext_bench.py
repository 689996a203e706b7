"""MaxText's own converter against unroll on a ~200M-parameter model trained by real MaxText
(bench/README.md, "MaxText's converter"). Runs in .venv-maxtext (Python 3.12, maxtext 0.2.5):

    UNROLL_BIN=build/src/cli/unroll .venv-maxtext/bin/python bench/maxtext_bench.py \
        --workdir <dir with ~2 GiB free> [--layers 12]

1. trains a llama2-style model (emb 1024, 8 heads of 128, MLP 4096, --layers layers: 201M
   parameters at 12, 2.4 GB of training state with the Adam moments) 2 steps with
   `python -m maxtext.trainers.pre_train.train`, like tests/maxtext/driver.py and cached the same
   way (only its step 1 is kept);
2. reads the state's files once (the page cache is then warm for both tools alike), then times
   under /usr/bin/time -v, one run each, in this order:
     maxtext  python -m maxtext.utils.generate_param_only_checkpoint force_unroll=true
     unroll   $UNROLL_BIN with the same config and keys
3. checks that both outputs hold the same leaves, dtypes, shapes and bits;
4. prints wall time, CPU time and peak RSS of each, the ratios, and writes
   <workdir>/maxtext_bench.json.
Exit status non-zero if a tool fails or the outputs differ."""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "maxtext"))
import driver  # noqa: E402  (sets DECOUPLE_GCLOUD, JAX_PLATFORMS, JAX_DEFAULT_PRNG_IMPL)
import numpy as np  # noqa: E402


def model(layers: int) -> list:
    return ["base_emb_dim=1024", "base_num_query_heads=8", "base_num_kv_heads=8",
            "head_dim=128", "base_mlp_dim=4096", f"base_num_decoder_layers={layers}"]


def timed(cmd: list, log: pathlib.Path) -> dict:
    """Runs cmd under /usr/bin/time -v: wall and CPU seconds, peak RSS (bytes), exit status."""
    with open(log, "w") as f:
        rc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=f, stderr=subprocess.STDOUT
                            ).returncode
    text = log.read_text(errors="replace")

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.*)$", text, re.M)
        if not m:
            raise SystemExit(f"maxtext_bench: no '{name}' in {log}")
        return m.group(1).strip()

    wall = 0.0
    for part in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":"):
        wall = wall * 60 + float(part)
    return {"rc": rc, "wall_s": wall,
            "cpu_s": float(field("User time (seconds)")) + float(field("System time (seconds)")),
            "peak_rss_bytes": int(field("Maximum resident set size (kbytes)")) * 1024,
            "log": str(log)}


def warm(path: pathlib.Path) -> int:
    """Reads every file under path once; returns the bytes read."""
    total = 0
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                total += len(chunk)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, type=pathlib.Path)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--train-only", action="store_true", help="train (or find cached), then stop")
    a = ap.parse_args()
    unroll = os.environ.get("UNROLL_BIN") or str(ROOT / "build" / "src" / "cli" / "unroll")
    if not os.access(unroll, os.X_OK) or not os.access("/usr/bin/time", os.X_OK):
        raise SystemExit("maxtext_bench: needs UNROLL_BIN (the built unroll) and /usr/bin/time")
    family = f"bench-llama2-1024x{a.layers}"
    driver.ALL[family] = model(a.layers)
    items = driver.train(family)
    for step in items.parent.parent.iterdir():  # keep the cache to the one step used
        if step.name != items.parent.name and step.name.isdigit():
            shutil.rmtree(step)
    if a.train_only:
        print(items)
        return 0
    a.workdir.mkdir(parents=True, exist_ok=True)
    out = a.workdir / "maxtext_bench"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    keys = ["force_unroll=true", *model(a.layers), *driver.COMMON]
    state_bytes = warm(items)
    runs = {
        "maxtext": timed([sys.executable, "-m", "maxtext.utils.generate_param_only_checkpoint",
                          driver.BASE_YML, f"load_full_state_path={items}",
                          f"base_output_directory={out}", "run_name=maxtext", *keys],
                         out / "maxtext.log"),
    }
    warm(items)
    runs["unroll"] = timed([unroll, "-q", driver.BASE_YML, f"load_full_state_path={items}",
                            f"base_output_directory={out}", "run_name=unroll", *keys],
                           out / "unroll.log")
    failed = [k for k, r in runs.items() if r["rc"] != 0]
    if failed:
        raise SystemExit(f"maxtext_bench: {', '.join(failed)} failed, see {out}")
    cmp = driver.bit_differences(str(out / "unroll" / "checkpoints" / "0" / "items"),
                                 str(out / "maxtext" / "checkpoints" / "0" / "items"))
    params = sum(int(np.prod(s)) for s in driver.checkpoint_tree(
        str(out / "unroll" / "checkpoints" / "0" / "items")).values())
    m, u = runs["maxtext"], runs["unroll"]
    result = {"maxtext": driver.maxtext.__version__, "layers": a.layers, "parameters": params,
              "state_bytes": state_bytes, "runs": runs, "leaves_compared": cmp["leaves_compared"],
              "differences": cmp["differences"],
              "wall_ratio": m["wall_s"] / u["wall_s"],
              "rss_ratio": m["peak_rss_bytes"] / u["peak_rss_bytes"]}
    (a.workdir / "maxtext_bench.json").write_text(json.dumps(result, indent=1))
    print(f"maxtext {result['maxtext']}, {params / 1e6:.0f}M parameters, "
          f"{state_bytes / 1e9:.2f} GB training state (page cache warm)")
    print(f"{'':10}{'wall s':>9}{'cpu s':>9}{'peak RSS':>12}")
    for name, r in runs.items():
        print(f"{name:10}{r['wall_s']:9.2f}{r['cpu_s']:9.2f}{r['peak_rss_bytes'] / 2**20:9.0f} MiB")
    print(f"MaxText / unroll: wall x{result['wall_ratio']:.1f}, peak RSS x{result['rss_ratio']:.1f}; "
          f"outputs: {cmp['leaves_compared']} leaves compared, "
          f"{'bit for bit equal' if not cmp['differences'] else 'DIFFERENT'}")
    shutil.rmtree(out / "maxtext" / "checkpoints", ignore_errors=True)
    shutil.rmtree(out / "unroll" / "checkpoints", ignore_errors=True)
    return 1 if cmp["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
