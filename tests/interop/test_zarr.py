"""Zarr layer interop: TensorStore writes, C (zarr_tool) reads bit for bit, and back.

zarr_tool (tests/unit/zarr/zarr_tool.c) is found at
$UNROLL_BUILD_DIR/tests/unit/zarr/zarr_tool (default: <repo>/build).
"""
import base64
import json
import os
import pathlib
import subprocess

import ml_dtypes
import numpy as np
import pytest
import tensorstore as ts

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("UNROLL_BUILD_DIR", ROOT / "build"))
TOOL = BUILD / "tests" / "unit" / "zarr" / "zarr_tool"

# Every dtype of include/unroll/dtype.h that TensorStore (0.1.85) knows: it has no uint4
# and no float8_e4m3, so the C writer refuses those two (test_c_refuses_types_tensorstore_lacks).
DTYPES = [
    "bool", "int4", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "float8_e3m4", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
]

# (shape, chunk) for ranks 0..6, odd sizes with edge chunks.
SHAPES = [
    ([], []),
    ([7], [3]),
    ([5, 6], [2, 4]),
    ([3, 4, 5], [2, 3, 2]),
    ([2, 3, 1, 5], [1, 2, 1, 3]),
    ([3, 1, 2, 3, 2], [2, 1, 1, 2, 2]),
    ([2, 2, 1, 3, 1, 2], [1, 2, 1, 2, 1, 1]),
]


@pytest.fixture(scope="module")
def tool():
    if not TOOL.is_file():
        pytest.fail(f"zarr_tool not found at {TOOL}: build it (UNROLL_BUILD_DIR)")
    return TOOL


def np_dtype(name):
    if hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def random_array(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    dt = np_dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        raw = rng.integers(0, 2, n, dtype=np.uint8)
    elif dtype == "int4":
        raw = rng.integers(0, 16, n, dtype=np.uint8)  # TensorStore keeps the low nibble
    else:
        raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def c_run(tool, *args, stdin=None, check=True):
    p = subprocess.run([str(tool), *map(str, args)], input=stdin, capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"zarr_tool {args} failed: {p.stderr.decode()}")
    return p


def c_read(tool, path, prefix, *extra, mode="read"):
    p = c_run(tool, mode, path, prefix, *extra)
    nl = p.stdout.index(b"\n")
    head = json.loads(p.stdout[:nl])
    body = p.stdout[nl + 1:]
    assert len(body) == head["nbytes"]
    return head, body


def ts_create(path, driver, dtype, shape, metadata=None, **kw):
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
    if metadata is not None:
        spec["metadata"] = metadata
        if "fill_value" in metadata and dtype is not None:
            # TensorStore wants the dtype inside the metadata next to a fill value.
            if driver == "zarr3":
                metadata["data_type"] = dtype
            else:
                dt = np_dtype(dtype)
                metadata["dtype"] = dtype if hasattr(ml_dtypes, dtype) else dt.str
            dtype = None
    return ts.open(spec, create=True, delete_existing=True, dtype=dtype, shape=shape, **kw).result()


def ts_read(path, driver):
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}).result()
    return np.asarray(t.read().result())


def orbax_v3(chunk):
    # What Orbax asks TensorStore for (tensorstore_utils.py): one inner chunk per shard.
    return {
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": chunk,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}]}}],
    }


def v3_meta(chunk, codecs, **extra):
    m = {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
         "codecs": codecs}
    m.update(extra)
    return m


def bytes_codec(dtype, endian="little"):
    if np_dtype(dtype).itemsize == 1:
        return {"name": "bytes"}
    return {"name": "bytes", "configuration": {"endian": endian}}


# ---- TensorStore writes, C reads ------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", range(7))
def test_c_reads_orbax_zarr3(tool, tmp_path, dtype, rank):
    shape, chunk = SHAPES[rank]
    data = random_array(dtype, shape, rank)
    t = ts_create(tmp_path / "a", "zarr3", dtype, shape, orbax_v3(chunk))
    t.write(data).result()
    head, body = c_read(tool, tmp_path, "a")
    assert head["dtype"] == dtype and head["shape"] == shape and head["zarr_format"] == 3
    assert body == ts_read(tmp_path / "a", "zarr3").tobytes()
    assert body == np.ascontiguousarray(data).tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", range(7))
def test_c_reads_orbax_zarr2(tool, tmp_path, dtype, rank):
    shape, chunk = SHAPES[rank]
    data = random_array(dtype, shape, 100 + rank)
    t = ts_create(tmp_path / "a", "zarr", dtype, shape,
                  {"chunks": chunk, "compressor": {"id": "zstd", "level": 1}})
    t.write(data).result()
    head, body = c_read(tool, tmp_path, "a")
    assert head["dtype"] == dtype and head["shape"] == shape and head["zarr_format"] == 2
    assert body == np.ascontiguousarray(data).tobytes()


V3_CONFIGS = {
    "bytes_only": lambda dt, ch: v3_meta(ch, [bytes_codec(dt)]),
    "gzip": lambda dt, ch: v3_meta(ch, [bytes_codec(dt), {"name": "gzip", "configuration": {"level": 5}}]),
    "big_endian_crc32c": lambda dt, ch: v3_meta(ch, [bytes_codec(dt, "big"), {"name": "crc32c"}]),
    "transpose_zstd": lambda dt, ch: v3_meta(ch, [
        {"name": "transpose", "configuration": {"order": list(reversed(range(len(ch))))}},
        bytes_codec(dt), {"name": "zstd", "configuration": {"level": 5, "checksum": True}}]),
    "zstd_gzip_crc": lambda dt, ch: v3_meta(ch, [bytes_codec(dt), {"name": "zstd"},
                                                {"name": "gzip"}, {"name": "crc32c"}]),
    "v2_keys": lambda dt, ch: v3_meta(ch, [bytes_codec(dt)],
                                      chunk_key_encoding={"name": "v2"}),
    "default_dot_keys": lambda dt, ch: v3_meta(
        ch, [bytes_codec(dt), {"name": "zstd"}],
        chunk_key_encoding={"name": "default", "configuration": {"separator": "."}}),
}


@pytest.mark.parametrize("config", sorted(V3_CONFIGS))
@pytest.mark.parametrize("dtype", ["bool", "int16", "bfloat16", "float32", "complex64",
                                   "complex128", "uint64", "float8_e5m2"])
def test_c_reads_zarr3_codecs(tool, tmp_path, config, dtype):
    shape, chunk = [5, 7, 3], [2, 3, 2]
    data = random_array(dtype, shape, 7)
    t = ts_create(tmp_path / "a", "zarr3", dtype, shape, V3_CONFIGS[config](dtype, chunk))
    t.write(data).result()
    _, body = c_read(tool, tmp_path, "a")
    assert body == data.tobytes()


def sharded(dtype, shard, inner, location="end", inner_codecs=None, index_codecs=None):
    conf = {"chunk_shape": inner,
            "codecs": inner_codecs or [bytes_codec(dtype), {"name": "zstd"}],
            "index_codecs": index_codecs or [{"name": "bytes", "configuration": {"endian": "little"}},
                                             {"name": "crc32c"}],
            "index_location": location}
    return v3_meta(shard, [{"name": "sharding_indexed", "configuration": conf}])


@pytest.mark.parametrize("location", ["end", "start"])
@pytest.mark.parametrize("dtype", ["int32", "bfloat16", "complex128", "bool"])
def test_c_reads_sharding_several_inner_absent(tool, tmp_path, location, dtype):
    shape, shard, inner = [9, 10], [4, 6], [2, 3]
    data = random_array(dtype, shape, 11)
    # Zero (= fill) regions: TensorStore leaves those inner chunks, or whole shards, absent.
    data[0:2, 0:3] = np.zeros((), dtype=data.dtype)
    data[4:8, 6:10] = np.zeros((), dtype=data.dtype)
    t = ts_create(tmp_path / "a", "zarr3", dtype, shape, sharded(dtype, shard, inner, location))
    t.write(data).result()
    head, body = c_read(tool, tmp_path, "a")
    assert head["chunk_shape"] == inner
    assert body == data.tobytes()
    # The zeroed shard (1, 1) holds no stored value at all.
    assert not (tmp_path / "a" / "c" / "1" / "1").exists()
    # One absent inner chunk, read alone, is the fill value.
    _, chunk = c_read(tool, tmp_path, "a", "0,0", mode="chunk")
    assert chunk == np.zeros(inner, data.dtype).tobytes()


def test_c_reads_sharding_uncompressed_index_and_transposed_inner(tool, tmp_path):
    shape, shard, inner = [6, 8], [6, 8], [3, 2]
    data = random_array("float32", shape, 3)
    meta = sharded("float32", shard, inner,
                   inner_codecs=[{"name": "transpose", "configuration": {"order": [1, 0]}},
                                 {"name": "bytes", "configuration": {"endian": "big"}},
                                 {"name": "gzip"}],
                   index_codecs=[{"name": "bytes", "configuration": {"endian": "big"}}])
    ts_create(tmp_path / "a", "zarr3", "float32", shape, meta).write(data).result()
    _, body = c_read(tool, tmp_path, "a")
    assert body == data.tobytes()


@pytest.mark.parametrize("fill", [1.5, "NaN", "Infinity", "-Infinity", "0x7fc00001"])
def test_c_reads_zarr3_missing_chunks_fill(tool, tmp_path, fill):
    shape = [5, 4]
    t = ts_create(tmp_path / "a", "zarr3", "float32", shape,
                  v3_meta([2, 2], [bytes_codec("float32")], fill_value=fill))
    t[0:2, 0:2].write(np.arange(4, dtype=np.float32).reshape(2, 2)).result()
    _, body = c_read(tool, tmp_path, "a")
    assert body == ts_read(tmp_path / "a", "zarr3").tobytes()


@pytest.mark.parametrize("dtype,fill", [("int64", -9007199254740993), ("uint64", 18446744073709551615),
                                        ("bool", True), ("complex64", [1.0, "NaN"]),
                                        ("bfloat16", 3.0), ("float16", -0.0),
                                        ("float8_e4m3fn", 448.0), ("int4", -3)])
def test_c_reads_fill_values(tool, tmp_path, dtype, fill):
    t = ts_create(tmp_path / "a", "zarr3", dtype, [3, 3],
                  v3_meta([2, 2], [bytes_codec(dtype)], fill_value=fill))
    _, body = c_read(tool, tmp_path, "a")
    assert body == ts_read(tmp_path / "a", "zarr3").tobytes()
    _ = t


V2_CONFIGS = {
    "zlib": {"compressor": {"id": "zlib", "level": 4}},
    "gzip": {"compressor": {"id": "gzip", "level": 4}},
    "null": {"compressor": None},
    "order_f": {"compressor": {"id": "zstd", "level": 3}, "order": "F"},
    "slash": {"compressor": None, "dimension_separator": "/"},
    "fill_nan": {"compressor": None, "fill_value": "NaN"},
    "fill_num": {"compressor": None, "fill_value": 2},
}


@pytest.mark.parametrize("config,dtype", [
    (c, d) for c in sorted(V2_CONFIGS)
    for d in ["int32", "float32", "bfloat16", "complex64", "float64"]
    if not (c == "fill_nan" and d == "int32")])  # NaN needs a float type
def test_c_reads_zarr2_configs(tool, tmp_path, config, dtype):
    shape = [5, 7, 3]
    meta = dict(V2_CONFIGS[config], chunks=[2, 3, 2])
    if dtype == "complex64" and "fill_value" in meta:
        # TensorStore's zarr2 complex fill value is base64 of the element's bytes.
        fill = np.complex64(complex(float(meta["fill_value"]), 1.0)).tobytes()
        meta["fill_value"] = base64.b64encode(fill).decode()
    data = random_array(dtype, shape, 5)
    t = ts_create(tmp_path / "a", "zarr", dtype, shape, meta)
    if config.startswith("fill"):
        t[0:2, 0:3, 0:2].write(data[0:2, 0:3, 0:2]).result()  # the rest is missing
    else:
        t.write(data).result()
    _, body = c_read(tool, tmp_path, "a")
    assert body == ts_read(tmp_path / "a", "zarr").tobytes()


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">c16", ">u2", "<f8", "|b1", "|u1"])
def test_c_reads_zarr2_numpy_typestrings(tool, tmp_path, dtype):
    shape = [4, 5]
    data = np.arange(20).reshape(shape).astype(np.dtype(dtype))
    t = ts_create(tmp_path / "a", "zarr", None, shape,
                  {"dtype": dtype, "chunks": [3, 2], "compressor": None})
    t.write(data).result()
    meta = json.loads((tmp_path / "a" / ".zarray").read_text())
    assert meta["dtype"] == dtype
    _, body = c_read(tool, tmp_path, "a")
    assert body == data.astype(data.dtype.newbyteorder("<")).tobytes()


def test_c_reads_boxes(tool, tmp_path):
    shape = [9, 10, 7]
    data = random_array("float32", shape, 9)
    ts_create(tmp_path / "a", "zarr3", "float32", shape,
              sharded("float32", [4, 6, 7], [2, 3, 7])).write(data).result()
    rng = np.random.default_rng(1)
    for _ in range(25):
        start = [int(rng.integers(0, s)) for s in shape]
        count = [int(rng.integers(1, s - a + 1)) for s, a in zip(shape, start)]
        _, body = c_read(tool, tmp_path, "a", ",".join(map(str, start)),
                         ",".join(map(str, count)), mode="box")
        sl = tuple(slice(a, a + c) for a, c in zip(start, count))
        assert body == np.ascontiguousarray(data[sl]).tobytes(), (start, count)


# ---- C writes, TensorStore reads ------------------------------------------------------


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", range(7))
def test_tensorstore_reads_c_writes(tool, tmp_path, fmt, dtype, rank):
    shape, chunk = SHAPES[rank]
    data = random_array(dtype, shape, 1000 + rank)
    c_run(tool, "write", tmp_path, "a", fmt, dtype, ",".join(map(str, shape)) or "-",
          ",".join(map(str, chunk)) or "-", stdin=data.tobytes())
    got = ts_read(tmp_path / "a", "zarr3" if fmt == 3 else "zarr")
    assert got.dtype == data.dtype and list(got.shape) == shape
    assert got.tobytes() == data.tobytes()


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype", ["int32", "bool", "bfloat16", "complex64", "float8_e4m3fn"])
def test_c_metadata_equals_tensorstore(tool, tmp_path, fmt, dtype):
    """The metadata C writes is byte-identical to what TensorStore writes for Orbax."""
    shape, chunk = [5, 6], [2, 4]
    c_run(tool, "write", tmp_path / "c", "a", fmt, dtype, "5,6", "2,4",
          stdin=np.zeros(shape, np_dtype(dtype)).tobytes())
    if fmt == 3:
        ts_create(tmp_path / "t" / "a", "zarr3", dtype, shape, orbax_v3(chunk))
        name = "zarr.json"
    else:
        ts_create(tmp_path / "t" / "a", "zarr", dtype, shape,
                  {"chunks": chunk, "compressor": {"id": "zstd"}})
        name = ".zarray"
    assert (tmp_path / "c" / "a" / name).read_text() == (tmp_path / "t" / "a" / name).read_text()


@pytest.mark.parametrize("dtype", ["uint4", "float8_e4m3"])
def test_c_refuses_types_tensorstore_lacks(tool, tmp_path, dtype):
    p = c_run(tool, "write", tmp_path, "a", 3, dtype, "4", "2", stdin=bytes(4), check=False)
    assert p.returncode == 1 and "unsupported" in p.stderr.decode()


def test_stored_bytes(tool, tmp_path):
    data = random_array("float32", [5, 6], 2)
    c_run(tool, "write", tmp_path, "p.q", 3, "float32", "5,6", "2,4", stdin=data.tobytes())
    total = sum(f.stat().st_size for f in (tmp_path / "p.q" / "c").rglob("*") if f.is_file())
    assert int(c_run(tool, "stored", tmp_path, "p.q").stdout) == total


# ---- damaged metadata and chunks --------------------------------------------------------

DAMAGED_V3 = {
    "invalid_json": ('{"zarr_format":3,', "invalid JSON"),
    "shape_type": ('{"zarr_format":3,"node_type":"array","shape":"x"}', "shape"),
    "negative_shape": (None, "shape"),
    "huge_shape": (None, "overflow"),
    "unknown_dtype": (None, "data_type"),
    "unknown_codec": (None, "unsupported codec"),
    "rank_too_big": (None, "dimensions"),
}


def _v3_base():
    return {"chunk_grid": {"configuration": {"chunk_shape": [2]}, "name": "regular"},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"configuration": {"endian": "little"}, "name": "bytes"}],
            "data_type": "int32", "fill_value": 0, "node_type": "array", "shape": [4],
            "zarr_format": 3}


@pytest.mark.parametrize("case", sorted(DAMAGED_V3))
def test_damaged_zarr3_metadata(tool, tmp_path, case):
    text, needle = DAMAGED_V3[case]
    if text is None:
        m = _v3_base()
        if case == "negative_shape":
            m["shape"] = [-4]
        elif case == "huge_shape":
            m["shape"] = [2 ** 52, 2 ** 52]
            m["chunk_grid"]["configuration"]["chunk_shape"] = [1, 1]
        elif case == "unknown_dtype":
            m["data_type"] = "float7"
        elif case == "unknown_codec":
            m["codecs"].append({"name": "blosc"})
        elif case == "rank_too_big":
            m["shape"] = [1] * 33
            m["chunk_grid"]["configuration"]["chunk_shape"] = [1] * 33
        text = json.dumps(m)
    d = tmp_path / "bad.array"
    d.mkdir()
    (d / "zarr.json").write_text(text)
    p = c_run(tool, "read", tmp_path, "bad.array", check=False)
    msg = p.stderr.decode()
    assert p.returncode == 1 and "bad.array" in msg and needle in msg, msg


@pytest.mark.parametrize("compressor,needle", [({"id": "blosc", "cname": "lz4"}, "unsupported codec"),
                                               ({"id": "bz2"}, "unsupported codec"),
                                               ("zstd", "compressor")])
def test_damaged_zarr2_compressor(tool, tmp_path, compressor, needle):
    d = tmp_path / "w.kernel"
    d.mkdir()
    (d / ".zarray").write_text(json.dumps({
        "chunks": [2], "compressor": compressor, "dimension_separator": ".", "dtype": "<i4",
        "fill_value": None, "filters": None, "order": "C", "shape": [4], "zarr_format": 2}))
    p = c_run(tool, "read", tmp_path, "w.kernel", check=False)
    msg = p.stderr.decode()
    assert p.returncode == 1 and "w.kernel" in msg and needle in msg, msg


@pytest.mark.parametrize("fmt", [2, 3])
def test_chunk_of_wrong_size_is_corrupt(tool, tmp_path, fmt):
    data = np.arange(12, dtype=np.int32)
    c_run(tool, "write", tmp_path, "a", fmt, "int32", "12", "4", stdin=data.tobytes())
    # Replace chunk 1 with a valid encoding of the wrong size, written by TensorStore.
    other = tmp_path / "other"
    if fmt == 3:
        ts_create(other, "zarr3", "int32", [10], orbax_v3([5])).write(np.arange(10, dtype=np.int32)).result()
        (tmp_path / "a" / "c" / "1").write_bytes((other / "c" / "0").read_bytes())
        key = "a/c/1"
    else:
        ts_create(other, "zarr", "int32", [10], {"chunks": [5], "compressor": {"id": "zstd"}}) \
            .write(np.arange(10, dtype=np.int32)).result()
        (tmp_path / "a" / "1").write_bytes((other / "0").read_bytes())
        key = "a/1"
    p = c_run(tool, "read", tmp_path, "a", check=False)
    msg = p.stderr.decode()
    assert p.returncode == 1 and "corrupt" in msg and key in msg, msg


# ---- chunk streams (ur_zarr_chunk_stream, zarr_tool stream) -----------------------------

STREAM_PIECES = ["", "1", "7,1,4093", "1048577", "65536,3"]


def c_stream(tool, path, prefix, idx, pieces):
    args = ["stream", path, prefix, ",".join(map(str, idx)) or "-"]
    if pieces:
        args.append(pieces)
    p = c_run(tool, *args)
    nl = p.stdout.index(b"\n")
    head = json.loads(p.stdout[:nl])
    body = p.stdout[nl + 1:]
    assert len(body) == head["nbytes"]
    return head, body


def expected_chunk(data, chunk, idx, fill):
    """The chunk as read_chunk fills it: the array's part, fill value past the edge."""
    out = np.full(chunk, fill, dtype=data.dtype)
    sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunk, data.shape))
    part = data[sl]
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out.tobytes()


def all_indices(shape, chunk):
    grid = [-(-s // c) for s, c in zip(shape, chunk)]
    return [list(i) for i in np.ndindex(*grid)]


STREAM_CASES = {
    # (driver, metadata, incremental)
    "zarr3_orbax": ("zarr3", lambda dt: orbax_v3([100, 96]), 1),
    "zarr3_shard_start_big_crc": ("zarr3", lambda dt: sharded(
        dt, [128, 192], [64, 96], "start",
        inner_codecs=[bytes_codec(dt, "big"), {"name": "zstd", "configuration": {"checksum": True}},
                      {"name": "crc32c"}]), 1),
    "zarr3_gzip_crc": ("zarr3", lambda dt: v3_meta([100, 96], [bytes_codec(dt), {"name": "gzip"},
                                                               {"name": "crc32c"}]), 1),
    "zarr3_transpose": ("zarr3", lambda dt: v3_meta([100, 96], [
        {"name": "transpose", "configuration": {"order": [1, 0]}}, bytes_codec(dt),
        {"name": "zstd"}]), 0),
    "zarr2_zstd": ("zarr", lambda dt: {"chunks": [100, 96], "compressor": {"id": "zstd", "level": 1}}, 1),
    "zarr2_none": ("zarr", lambda dt: {"chunks": [100, 96], "compressor": None}, 1),
    "zarr2_order_f": ("zarr", lambda dt: {"chunks": [100, 96], "compressor": {"id": "zstd"},
                                          "order": "F"}, 0),
}


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "complex64"])
def test_c_streams_tensorstore_chunks(tool, tmp_path, case, dtype):
    driver, meta, incremental = STREAM_CASES[case]
    shape = [230, 200]  # edge chunks on both axes
    data = random_array(dtype, shape, 21)
    data[0:64, 0:96] = np.zeros((), dtype=data.dtype)  # absent (inner) chunk where sharded
    t = ts_create(tmp_path / "a", driver, dtype, shape, meta(dtype))
    t.write(data).result()
    got_ts = ts_read(tmp_path / "a", driver)
    assert got_ts.tobytes() == data.tobytes()
    chunk = json.loads(c_run(tool, "chunk", tmp_path, "a", "0,0").stdout.split(b"\n")[0])[
        "chunk_shape"]
    for n, idx in enumerate(all_indices(shape, chunk)):
        pieces = STREAM_PIECES[n % len(STREAM_PIECES)]
        head, body = c_stream(tool, tmp_path, "a", idx, pieces)
        assert head["incremental"] == incremental
        assert body == expected_chunk(data, chunk, idx, 0), (idx, pieces)
        _, ref = c_read(tool, tmp_path, "a", ",".join(map(str, idx)), mode="chunk")
        assert body == ref


ORBAX_GEN = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np, jax, ml_dtypes
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
root, use_zarr3 = sys.argv[1], sys.argv[2] == "1"
mesh = Mesh(np.array(jax.devices()), ("d",))
rng = np.random.default_rng(3)
w = rng.standard_normal((1024, 2048)).astype(ml_dtypes.bfloat16)  # shards of 2 MiB
w[:, :300] = 0.25  # compressible part; the rest stores over 1 MiB per chunk
b = rng.standard_normal(1000).astype(np.float32)
tree = {"w": jax.device_put(w, NamedSharding(mesh, P("d", None))),
        "b": jax.device_put(b, NamedSharding(mesh, P()))}
mngr = ocp.CheckpointManager(root, item_names=("items",), item_handlers={
    "items": ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=use_zarr3)})
mngr.save(0, args=ocp.args.Composite(items=ocp.args.PyTreeSave(tree)))
mngr.wait_until_finished()
mngr.close()
np.save(os.path.join(root, "w.npy"), w.view(np.uint16))
"""


@pytest.mark.parametrize("use_zarr3", [True, False], ids=["zarr3", "zarr2"])
def test_c_streams_orbax_written_chunks(tool, tmp_path, use_zarr3):
    import sys
    root = tmp_path / "ckpt"
    p = subprocess.run([sys.executable, "-c", ORBAX_GEN, str(root), str(int(use_zarr3))],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    items = root / "0" / "items"
    driver = "zarr3" if use_zarr3 else "zarr"
    w = np.load(root / "w.npy").view(ml_dtypes.bfloat16)
    for name, arr in [("w", w), ("b", None)]:
        t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(items / name)}}).result()
        full = np.asarray(t.read().result())
        if arr is not None:
            assert full.tobytes() == arr.tobytes()
        head0, _ = c_read(tool, items, name, ",".join(["0"] * full.ndim), mode="chunk")
        chunk = head0["chunk_shape"]
        if name == "w":
            assert chunk == [512, 2048]  # Orbax: one chunk per device shard
            stored = [f.stat().st_size for f in (items / "w").rglob("*") if f.is_file()
                      and not f.name.startswith((".z", "zarr.json"))]
            assert len(stored) == 2 and min(stored) > 1 << 20  # several 1 MiB pieces
        for n, idx in enumerate(all_indices(list(full.shape), chunk)):
            for pieces in ["", "1048575,2", "4093"]:
                head, body = c_stream(tool, items, name, idx, pieces)
                assert head["incremental"] == 1
                assert body == expected_chunk(full, chunk, idx, 0), (name, idx, pieces)
