#!/usr/bin/env python3
"""Seed tests/fuzz/corpora/<target>/ from real fixtures (small files only).

Sources: tests/data (committed fixtures written by TensorStore/Orbax, upstream/ included), and,
when present, the generated MaxText checkpoints of the interop tests (build*/fixtures). Files
are named by the SHA-1 of their content, as libFuzzer names corpus entries, so rerunning adds
nothing twice. Crash inputs found by fuzzing are added by hand (named crash-<what>). Needs
the `zstd` command for the decompressed-body seeds of the OCDBT targets.

    python3 tests/fuzz/make_seeds.py [EXTRA_FIXTURE_DIR...]
"""
import hashlib
import pathlib
import struct
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPORA = ROOT / "tests" / "fuzz" / "corpora"
MAX_SEED = 32 * 1024
PER_TARGET = 40

MAGIC = {"manifest": 0x0CDB3A2A, "btree": 0x0CDB20DE, "vnode": 0x0CDB1234}
counts = {}


def add(target, data):
    if len(data) > MAX_SEED or counts.get(target, 0) >= PER_TARGET:
        return
    d = CORPORA / target
    d.mkdir(parents=True, exist_ok=True)
    p = d / hashlib.sha1(data).hexdigest()
    if not p.exists():
        p.write_bytes(data)
        counts[target] = counts.get(target, 0) + 1


def varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, pos


def objects(blob):
    """(kind, bytes) of every OCDBT object in a data file or manifest (found by magic)."""
    out = []
    for kind, magic in MAGIC.items():
        m = struct.pack(">I", magic)
        at = blob.find(m)
        while at >= 0:
            if at + 12 <= len(blob):
                (length,) = struct.unpack_from("<Q", blob, at + 4)
                if 16 <= length <= len(blob) - at:
                    out.append((kind, blob[at:at + length]))
            at = blob.find(m, at + 1)
    return out


def body(obj):
    """The decoded body of an object (zstd payload decompressed), or None."""
    _, pos = varint(obj, 12)
    fmt, pos = varint(obj, pos)
    payload = obj[pos:-4]
    if fmt == 0:
        return payload
    try:
        return subprocess.run(["zstd", "-dqc"], input=payload, capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def seed_ocdbt(path):
    blob = path.read_bytes()
    for kind, obj in objects(blob):
        target = {"manifest": "ocdbt_manifest", "btree": "ocdbt_btree",
                  "vnode": "ocdbt_version_node"}[kind]
        add(target, obj)
        add("ocdbt_codec", bytes([list(MAGIC).index(kind)]) + obj)
        b = body(obj)
        if b is None:
            continue
        if not b[:4] in (struct.pack(">I", m) for m in MAGIC.values()):
            add(target, b)
        if kind == "btree" and len(b) > 2:
            add("ocdbt_table", b"\x00" + b[1:])  # height byte, then the table
        if kind == "vnode" and len(b) > 2:
            add("ocdbt_table", b"\x01" + b[2:])  # arity byte, height byte, then the table


def seed_dir(top):
    top = pathlib.Path(top)
    if not top.is_dir():
        return
    for p in sorted(top.rglob("*")):
        if not p.is_file() or p.stat().st_size > MAX_SEED:
            continue
        name = p.name
        if name == "manifest.ocdbt" or p.parent.name == "d":
            seed_ocdbt(p)
        elif name == "zarr.json":
            add("zarr_v3_meta", p.read_bytes())
            meta = p.read_bytes()
            if b"sharding_indexed" in meta:
                for shard in sorted((p.parent / "c").rglob("*"))[:2] if (p.parent / "c").is_dir() else []:
                    if shard.is_file() and shard.stat().st_size < MAX_SEED:
                        add("zarr_shard", struct.pack("<H", len(meta)) + meta + shard.read_bytes())
        elif name == ".zarray":
            add("zarr_v2_meta", p.read_bytes())
        elif name == "_METADATA":
            add("orbax_metadata", p.read_bytes())
        elif name == "_sharding":
            add("orbax_sharding", p.read_bytes())
        elif name == "_CHECKPOINT_METADATA" or p.parent.name == "array_metadatas":
            add("orbax_ckpt_meta", p.read_bytes())
        elif name.endswith((".yml", ".yaml")):
            add("yaml_config", p.read_bytes())


def main():
    dirs = [ROOT / "tests" / "data"]
    dirs += sorted(ROOT.glob("build*/fixtures"))[:1]
    dirs += [pathlib.Path(a) for a in sys.argv[1:]]
    for d in dirs:
        seed_dir(d)
    for i in range(8):  # tensor_copy: op, rank, axis, dtype pair, shape bytes, modes, seed, data
        add("tensor_copy", bytes([i % 3, 1 + i % 6, i, (i * 37) & 0xFF, 3, 4, 2, 5, 1, 2, i])
            + bytes(range(32)))
    for i in range(8):  # tensor_copy's join: parts, position and axis in the axis byte
        add("tensor_copy", bytes([3, 1 + i % 4, 1 + 5 * i + 16 * (i // 2), 1 + i, 3, 4, 2, 5, 1,
                                  2, i]) + bytes(range(32)))
    for i in range(8):  # tensor_copy's cut: the axis cut and the order in the axis byte
        add("tensor_copy", bytes([4, 1 + i % 4, i + 8 * (i // 2), 1 + i, 3, 4, 2, 5, 1, 2, i])
            + bytes(range(32)))
    for t, n in sorted(counts.items()):
        print(f"{t}: {n} new")


if __name__ == "__main__":
    main()
