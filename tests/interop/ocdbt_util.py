"""Helpers for the OCDBT interop tests: the record stream of tests/unit/ocdbt/ocdbt_tool.c and
TensorStore's view of a database (the oracle)."""
import os
import pathlib
import struct
import subprocess

import tensorstore as ts

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))


def ocdbt_tool() -> pathlib.Path:
    return build_dir() / "tests" / "unit" / "ocdbt" / "ocdbt_tool"


def encode_records(items):
    """items: iterable of (bytes key, bytes value) -> the tool's stdin stream."""
    out = bytearray()
    for k, v in items:
        out += struct.pack("<I", len(k)) + k + struct.pack("<Q", len(v)) + v
    return bytes(out)


def decode_records(data: bytes):
    out = []
    pos = 0
    while pos < len(data):
        (klen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        k = data[pos:pos + klen]
        pos += klen
        (vlen,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        out.append((k, data[pos:pos + vlen]))
        pos += vlen
    return out


def c_write(dst, items, *args):
    subprocess.run([str(ocdbt_tool()), "write", *map(str, args), str(dst)],
                   input=encode_records(items), check=True, capture_output=True)


def c_dump(path):
    """Every (key, value) of the database as the C reader returns them, in list order."""
    proc = subprocess.run([str(ocdbt_tool()), "dump", str(path)], capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())
    return decode_records(proc.stdout)


def ts_open(path, **spec):
    base = {"driver": "ocdbt", "base": f"file://{os.path.abspath(path)}/"}
    base.update(spec)
    return ts.KvStore.open(base).result()


def ts_dump(path):
    kv = ts_open(path)
    keys = sorted(kv.list().result())
    futures = [kv.read(k) for k in keys]  # issued together: TensorStore batches them
    return [(k, f.result().value) for k, f in zip(keys, futures)]
