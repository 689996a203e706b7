"""Summarize a bench/run.sh work directory: a table on stdout, and the same figures as JSON.

  report.py --workdir DIR --sizes N1 N2 ... [--json FILE]

Per size (GiB of fp32 parameters) and tool — (a) unroll, (b) the Python reference pipeline,
(c) the floor, (d) the codec floor — wall time, CPU time (user + sys) and peak RSS (max
resident set size) from `/usr/bin/time -v`; then the ratios (b)/(a) for time and RSS, (a)/(c)
and (a)/(d) for time, and each tool's RSS and wall-time growth from the first size to the last.
Standard library only.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

TOOLS = (("unroll", "(a) unroll"), ("reference", "(b) reference"), ("floor", "(c) floor"),
         ("codec", "(d) codec floor"), ("read", "(e) read floor"))
MiB = 1024**2
GiB = 1024**3


def parse_time(path: pathlib.Path) -> dict | None:
    """Wall, user, sys seconds and max RSS bytes from a `/usr/bin/time -v` report."""
    if not path.is_file():
        return None
    text = path.read_text()

    def field(label):
        m = re.search(rf"^\s*{re.escape(label)}:\s*(.+)$", text, re.M)
        return m.group(1).strip() if m else None

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    if wall is None:
        return None
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    user = float(field("User time (seconds)") or 0)
    sys_ = float(field("System time (seconds)") or 0)
    rss_kib = int(field("Maximum resident set size (kbytes)") or 0)
    return {"wall_s": secs, "user_s": user, "sys_s": sys_, "cpu_s": user + sys_,
            "peak_rss_bytes": rss_kib * 1024}


def _read(path: pathlib.Path):
    return path.read_text().strip() if path.is_file() else None


def collect(workdir: pathlib.Path, sizes: list) -> dict:
    out = {"sizes": []}
    for size in sizes:
        run = workdir / "runs" / size
        ckpt = json.loads((workdir / f"ckpt-{size}" / "bench_checkpoint.json").read_text())
        entry = {
            "params_gib": float(size),
            "layers": ckpt["layers"],
            "num_params": ckpt["num_params"],
            "params_bytes": ckpt["params_bytes"],
            "input_disk_bytes": ckpt["disk_bytes"],
            "threads": int(_read(run / "threads") or 0),
            "tools": {},
        }
        for name, _ in TOOLS:
            t = parse_time(run / f"{name}.time")
            if t is None:
                continue
            t["exit_status"] = int(_read(run / f"{name}.rc") or -1)
            ob = _read(run / f"{name}.out.bytes")
            if ob is not None:
                t["output_disk_bytes"] = int(ob)
            entry["tools"][name] = t
        phases = run / "reference.phases.json"
        if phases.is_file() and "reference" in entry["tools"]:
            entry["tools"]["reference"]["phases"] = json.loads(phases.read_text())
        for name in ("floor", "codec"):
            fl = run / f"{name}.stdout"
            if fl.is_file() and name in entry["tools"] and fl.read_text().strip():
                entry["tools"][name]["detail"] = json.loads(fl.read_text())
        if (run / "verify.rc").is_file():
            entry["verify"] = {"identical": _read(run / "verify.rc") == "0",
                               "detail": (_read(run / "verify.txt") or "")[-2000:]}
        entry["ratios"] = ratios(entry["tools"])
        out["sizes"].append(entry)
    if len(out["sizes"]) >= 2:
        first, last = out["sizes"][0], out["sizes"][-1]
        growth = {"from_gib": first["params_gib"], "to_gib": last["params_gib"]}
        for name, _ in TOOLS:
            a, b = first["tools"].get(name), last["tools"].get(name)
            if ok(a) and ok(b):
                growth[name] = {"rss": b["peak_rss_bytes"] / a["peak_rss_bytes"],
                                "rss_delta_bytes": b["peak_rss_bytes"] - a["peak_rss_bytes"],
                                "wall": b["wall_s"] / max(a["wall_s"], 1e-9)}
        out["growth"] = growth
    return out


def ok(t) -> bool:
    return bool(t) and t.get("exit_status") == 0


def killed(t) -> bool:
    """Killed by SIGKILL (exit status 137): on these runs, the kernel's out-of-memory killer."""
    return bool(t) and t.get("exit_status") in (137, -9)


def ratios(tools: dict) -> dict:
    a, b, c = tools.get("unroll"), tools.get("reference"), tools.get("floor")
    r = {}
    if ok(a) and ok(b):
        r["reference_over_unroll_wall"] = b["wall_s"] / max(a["wall_s"], 1e-9)
        r["reference_over_unroll_cpu"] = b["cpu_s"] / max(a["cpu_s"], 1e-9)
        r["reference_over_unroll_rss"] = b["peak_rss_bytes"] / max(a["peak_rss_bytes"], 1)
    elif ok(a) and killed(b):
        # lower bounds: the reference had used this much when it was killed
        r["reference_killed"] = True
        r["reference_over_unroll_wall_at_least"] = b["wall_s"] / max(a["wall_s"], 1e-9)
        r["reference_over_unroll_rss_at_least"] = b["peak_rss_bytes"] / max(
            a["peak_rss_bytes"], 1)
    if ok(a) and ok(c):
        r["unroll_over_floor_wall"] = a["wall_s"] / max(c["wall_s"], 1e-9)
        r["unroll_over_floor_cpu"] = a["cpu_s"] / max(c["cpu_s"], 1e-9)
    d, e = tools.get("codec"), tools.get("read")
    if ok(a) and ok(d) and "codec_cpu_s" in d.get("detail", {}):
        # floor -c: the zstd calls' CPU time alone (its loading is not the floor)
        codec_cpu = d["detail"]["codec_cpu_s"]
        r["codec_floor_s"] = d["detail"]["codec_cpu_per_thread_s"]
        r["unroll_over_codec_floor_wall"] = a["wall_s"] / max(r["codec_floor_s"], 1e-9)
        r["unroll_over_codec_floor_cpu"] = a["cpu_s"] / max(codec_cpu, 1e-9)
        if ok(e):
            # the machine's floor: the read, or the codec work over the cores
            r["floor_s"] = max(e["wall_s"], r["codec_floor_s"])
            r["unroll_over_machine_floor"] = a["wall_s"] / r["floor_s"]
    return r


def fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(res: dict) -> str:
    lines = []
    hdr = (f"{'size':>9} {'layers':>6} {'tool':<15} {'wall s':>9} {'CPU s':>9} "
           f"{'peak RSS MiB':>13} {'status':>6}")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for e in res["sizes"]:
        for name, label in TOOLS:
            t = e["tools"].get(name)
            if t is None:
                continue
            status = "killed" if killed(t) else str(t["exit_status"])
            lines.append(f"{e['params_gib']:>7g}G {e['layers']:>6} {label:<15} "
                         f"{t['wall_s']:>9.2f} {t['cpu_s']:>9.2f} "
                         f"{t['peak_rss_bytes'] / MiB:>13.1f} {status:>6}")
    lines.append("")
    for e in res["sizes"]:
        r = e["ratios"]
        lines.append(
            f"{e['params_gib']:g} GiB ({e['threads']} threads): "
            f"(b)/(a) wall {fmt(r.get('reference_over_unroll_wall'))}x, "
            f"CPU {fmt(r.get('reference_over_unroll_cpu'))}x, "
            f"RSS {fmt(r.get('reference_over_unroll_rss'))}x; "
            f"(a)/(c) wall {fmt(r.get('unroll_over_floor_wall'))}x, "
            f"CPU {fmt(r.get('unroll_over_floor_cpu'))}x; "
            f"(a)/(d) wall {fmt(r.get('unroll_over_codec_floor_wall'))}x, "
            f"CPU {fmt(r.get('unroll_over_codec_floor_cpu'))}x; "
            f"(a)/max((e), (d)) {fmt(r.get('unroll_over_machine_floor'))}x "
            f"(floor {fmt(r.get('floor_s'))} s)")
        if r.get("reference_killed"):
            lines.append(f"  (b) was killed (SIGKILL, most likely out of memory) after "
                         f"{e['tools']['reference']['wall_s']:.1f} s at "
                         f"{e['tools']['reference']['peak_rss_bytes'] / GiB:.1f} GiB RSS: "
                         f"(b)/(a) wall >= {r['reference_over_unroll_wall_at_least']:.2f}x, "
                         f"RSS >= {r['reference_over_unroll_rss_at_least']:.2f}x")
        if "verify" in e:
            lines.append(f"  (a) output == (b) output, bit for bit: "
                         f"{'yes' if e['verify']['identical'] else 'NO'}")
        ph = e["tools"].get("reference", {}).get("phases")
        if ph:
            lines.append("  reference phases: " + ", ".join(f"{k} {v:g}" for k, v in ph.items()))
    g = res.get("growth")
    if g:
        parts = []
        for name, label in TOOLS:
            if name in g:
                parts.append(f"{label}: RSS x{g[name]['rss']:.2f} "
                             f"({g[name]['rss_delta_bytes'] / MiB:+.1f} MiB), "
                             f"wall x{g[name]['wall']:.2f}")
        lines.append(f"growth {g['from_gib']:g} -> {g['to_gib']:g} GiB: " + "; ".join(parts))
    return "\n".join(lines)


def many_layers(run: pathlib.Path, threads: int, layers: int, json_out) -> None:
    """The many-layers table: wall, CPU, CPU/wall (how many cores were busy) and the ratio to
    the floor, for unroll on T threads and on 1 and for the floors."""
    rows = []
    for name in (f"unroll-t{threads}", "unroll-t1", "floor", "codec"):
        t = parse_time(run / f"{name}.time")
        if t is None:
            continue
        t["name"] = name
        t["rc"] = int(_read(run / f"{name}.rc") or 0)
        rows.append(t)
    floor = next((r for r in rows if r["name"] == "floor"), None)
    print(f"many layers: {layers} layers of small arrays, {threads} threads")
    print(f"{'tool':<12} {'wall s':>8} {'CPU s':>8} {'CPU/wall':>9} {'RSS MiB':>8} "
          f"{'/floor':>7}")
    for r in rows:
        busy = r["cpu_s"] / r["wall_s"] if r["wall_s"] > 0 else 0.0
        vs = r["wall_s"] / floor["wall_s"] if floor and floor["wall_s"] > 0 else 0.0
        r["cpu_per_wall"] = busy
        r["vs_floor"] = vs
        print(f"{r['name']:<12} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {busy:>9.2f} "
              f"{r['peak_rss_bytes'] / MiB:>8.0f} {vs:>7.2f}")
    if json_out:
        pathlib.Path(json_out).write_text(json.dumps(rows, indent=2) + "\n")
    if any(r["rc"] != 0 for r in rows):
        sys.exit(1)


BIG_TOOLS = (("read", "read floor (floor -r)"), ("unroll", "unroll"),
             ("floor", "I/O + codec floor"), ("reference", "Python reference"),
             ("maxtext", "MaxText's converter"), ("hf", "unroll to_huggingface"))
PHASES_RE = re.compile(r"unroll: phases \(thread seconds, wall/cpu\):(.*)$", re.M)


def codec_floor(workdir: pathlib.Path) -> dict | None:
    """floor -c's JSON line (the codec floor: libzstd alone), if it ran."""
    text = _read(workdir / "codec.stdout")
    if not text or _read(workdir / "codec.rc") != "0":
        return None
    return json.loads(text.splitlines()[-1])


def big(workdir: pathlib.Path, ckpt: pathlib.Path, cap: int) -> None:
    """The cold full-size run of bench/big.sh: per tool wall, CPU, peak RSS, status (an
    out-of-memory kill under the cap shows as `killed`), the load average before and after;
    unroll's phases and its ratio to the read floor; writes <workdir>/big.json."""
    info = json.loads((ckpt / "bench_checkpoint.json").read_text())
    res = {"checkpoint": info, "mem_cap_bytes": cap, "tools": {}}
    for name, label in BIG_TOOLS:
        t = parse_time(workdir / f"{name}.time")
        if t is None:
            continue
        t["rc"] = int(_read(workdir / f"{name}.rc") or -1)
        err = _read(workdir / f"{name}.stderr") or ""
        t["oom_killed"] = "memcap: oom_kill" in err or t["rc"] == 137
        t["uptime"] = (_read(workdir / f"{name}.uptime") or "").splitlines()
        t["label"] = label
        res["tools"][name] = t
    u = res["tools"].get("unroll")
    if u is not None:
        m = PHASES_RE.search(_read(workdir / "unroll.stderr") or "")
        if m:
            words = m.group(1).split()
            u["phases"] = {words[i]: dict(zip(("wall_s", "cpu_s"), map(float,
                                                                       words[i + 1].split("/"))))
                           for i in range(0, len(words), 2)}
        u["out_bytes"] = int(_read(workdir / "unroll.out.bytes") or 0)
        u["verify_rc"] = int(_read(workdir / "verify.rc") or -1)
        u["verify"] = (_read(workdir / "verify.stdout") or "").splitlines()[-1:]
        v = parse_time(workdir / "verify.time")
        if v is not None:
            u["verify_time"] = v
        r = res["tools"].get("read")
        if r is not None and r["wall_s"] > 0:
            res["unroll_over_read_floor"] = u["wall_s"] / r["wall_s"]
        codec = codec_floor(workdir)
        if codec is not None:
            res["codec_floor"] = codec
            # the machine's floor: the cold read, or the codec work over the cores
            floor = max(r["wall_s"] if r is not None else 0.0, codec["codec_cpu_per_thread_s"])
            res["floor_s"] = floor
            res["unroll_over_floor"] = u["wall_s"] / floor
    h = res["tools"].get("hf")
    if h is not None:
        h["out_bytes"] = int(_read(workdir / "hf.out.bytes") or 0)
        if u is not None and u["wall_s"] > 0:
            res["hf_over_unroll"] = h["wall_s"] / u["wall_s"]
    procs = [parse_time(workdir / f"multi.{i}.time") for i in range(2)]
    if all(procs) and (workdir / "multi.wall").is_file():
        res["multi"] = {"wall_s": float(_read(workdir / "multi.wall")),
                        "rc": int(_read(workdir / "multi.rc") or -1),
                        "cpu_s": sum(p["cpu_s"] for p in procs),
                        "peak_rss_bytes": [p["peak_rss_bytes"] for p in procs],
                        "uptime": (_read(workdir / "multi.uptime") or "").splitlines()}
    stored = 0
    chunks = ckpt / "chunks.tsv"
    if chunks.is_file():
        for line in chunks.read_text().splitlines():
            if line and not line.startswith("#"):
                stored += int(line.split("\t")[2])
    res["param_stored_bytes"] = stored
    (workdir / "big.json").write_text(json.dumps(res, indent=1) + "\n")
    print(f"{info['num_params'] / 1e9:.2f}B parameters, {info['layers']} layers, "
          f"{info['disk_bytes'] / GiB:.2f} GiB on disk, parameter chunks {stored / GiB:.2f} GiB; "
          f"memory cap {cap / GiB:.0f} GiB")
    print(f"{'tool':24}{'wall s':>9}{'CPU s':>9}{'peak RSS MiB':>14}  status / load before, after")
    for name, t in res["tools"].items():
        status = "OOM-killed" if t["oom_killed"] else ("ok" if t["rc"] == 0 else f"rc {t['rc']}")
        loads = [x.split("load average:")[-1].strip() for x in t["uptime"]]
        print(f"{t['label']:24}{t['wall_s']:9.2f}{t['cpu_s']:9.2f}"
              f"{t['peak_rss_bytes'] / MiB:14.0f}  {status} / {' ; '.join(loads)}")
    if u is not None:
        if "unroll_over_read_floor" in res:
            print(f"unroll / read floor: {res['unroll_over_read_floor']:.2f}x")
        c = res.get("codec_floor")
        if c is not None:
            print(f"codec floor (floor -c, {c['threads']} threads): decode "
                  f"{c['decode']['cpu_s']:.2f} CPU s ({c['decode']['mb_per_cpu_s']:.0f} MB/s), "
                  f"encode {c['encode']['cpu_s']:.2f} CPU s ({c['encode']['mb_per_cpu_s']:.0f} "
                  f"MB/s), {c['codec_cpu_s']:.2f} CPU s, {c['codec_cpu_per_thread_s']:.2f} s "
                  f"over the cores")
            print(f"floor = max(read, codec / cores) = {res['floor_s']:.2f} s; "
                  f"unroll / floor: {res['unroll_over_floor']:.2f}x")
        for k, v in u.get("phases", {}).items():
            print(f"  phase {k:12} wall {v['wall_s']:8.2f} s  cpu {v['cpu_s']:8.2f} s")
        print(f"  verify: rc {u['verify_rc']} {' '.join(u['verify'])}")
    if "hf_over_unroll" in res:
        print(f"unroll to_huggingface / unroll: {res['hf_over_unroll']:.2f}x "
              f"({res['tools']['hf']['out_bytes'] / GiB:.2f} GiB folder)")
    mp = res.get("multi")
    if mp is not None:
        loads = [x.split("load average:")[-1].strip() for x in mp["uptime"]]
        print(f"2 processes: wall {mp['wall_s']:.2f} s, CPU {mp['cpu_s']:.2f} s in all, peak RSS "
              f"{', '.join(f'{b / MiB:.0f}' for b in mp['peak_rss_bytes'])} MiB, rc {mp['rc']} "
              f"/ {' ; '.join(loads)}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "big":
        ap = argparse.ArgumentParser(prog="report.py big")
        ap.add_argument("--workdir", required=True)
        ap.add_argument("--ckpt", required=True)
        ap.add_argument("--cap", type=int, required=True)
        a = ap.parse_args(sys.argv[2:])
        big(pathlib.Path(a.workdir), pathlib.Path(a.ckpt), a.cap)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "many-layers":
        ap = argparse.ArgumentParser(prog="report.py many-layers")
        ap.add_argument("--run", required=True)
        ap.add_argument("--threads", type=int, required=True)
        ap.add_argument("--layers", type=int, required=True)
        ap.add_argument("--json")
        a = ap.parse_args(sys.argv[2:])
        many_layers(pathlib.Path(a.run), a.threads, a.layers, a.json)
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--sizes", nargs="+", required=True)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    res = collect(pathlib.Path(args.workdir), args.sizes)
    print(table(res))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    # a reference killed for lack of memory is a result, not a benchmark failure
    failed = [(e["params_gib"], n) for e in res["sizes"] for n, t in e["tools"].items()
              if not ok(t) and not (n == "reference" and killed(t))]
    bad_verify = [e["params_gib"] for e in res["sizes"]
                  if "verify" in e and not e["verify"]["identical"]]
    if failed or bad_verify:
        print(f"failures: {failed}; verification failed at: {bad_verify}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
