"""OCDBT interop: the C reader against TensorStore on every upstream database and on databases
TensorStore writes here; TensorStore against databases the C writer writes.

Needs the unroll binary (UNROLL_BIN) and the test-only tests/unit/ocdbt/ocdbt_tool
(under UNROLL_BUILD_DIR, default build/)."""
import random
import re
import subprocess

import pytest
import tensorstore as ts

import ocdbt_util as u


def all_fixture_dbs(upstream_data):
    return sorted(p.parent for p in upstream_data.rglob("manifest.ocdbt"))


@pytest.fixture(scope="module")
def tool():
    if not u.ocdbt_tool().is_file():
        pytest.fail(f"ocdbt_tool not found at {u.ocdbt_tool()}: build the tests first")
    return u.ocdbt_tool()


def run_ls(unroll_bin, *args):
    return subprocess.run([str(unroll_bin), "ls", *map(str, args)], capture_output=True)


def root_height(unroll_bin, path):
    out = run_ls(unroll_bin, "--manifest", path)
    assert out.returncode == 0, out.stderr
    heights = re.findall(rb"^version generation=\d+ .*root_height=(\d+)", out.stdout, re.M)
    return int(heights[-1])


# ---- (a) C reads what TensorStore wrote ----

def test_c_reads_every_upstream_database(upstream_data, tool, unroll_bin):
    dbs = all_fixture_dbs(upstream_data)
    assert len(dbs) >= 85
    checked = 0
    for db in dbs:
        if "missing_pytree_data_dir_d" in str(db) and not db.name.startswith("ocdbt.process"):
            proc = subprocess.run([str(tool), "dump", str(db)], capture_output=True)
            assert proc.returncode != 0
            assert b"/d/" in proc.stderr and b"cannot open data file" in proc.stderr
            ls = run_ls(unroll_bin, db)
            assert ls.returncode != 0 and b"unroll:" in ls.stderr
            continue
        expected = u.ts_dump(db)
        assert u.c_dump(db) == expected, db
        ls = run_ls(unroll_bin, "--sizes", db)
        assert ls.returncode == 0, ls.stderr
        lines = [ln.split(b"\t") for ln in ls.stdout.splitlines()]
        assert [(k, int(s)) for k, s in lines] == [(k, len(v)) for k, v in expected]
        checked += 1
    assert checked >= 82


def test_ls_min_arity_fixture(upstream_data, unroll_bin):
    db = upstream_data / "neuroglancer-ocdbt/kvstore/ocdbt/files_min_arity.ocdbt"
    out = run_ls(unroll_bin, db)
    assert out.stdout.split() == [b"#", b"a", b"b", b"baz/first", b"baz/x", b"baz/z", b"c",
                                  b"empty"]
    assert run_ls(unroll_bin, db, "baz/").stdout.split() == [b"baz/first", b"baz/x", b"baz/z"]
    assert run_ls(unroll_bin, "--cat", "a", db).stdout == b"abc"
    assert run_ls(unroll_bin, "--cat", "c", db).stdout == b"bar"
    missing = run_ls(unroll_bin, "--cat", "nope", db)
    assert missing.returncode != 0
    assert root_height(unroll_bin, db) == 3
    tree = run_ls(unroll_bin, "--tree", db).stdout
    assert tree.count(b"node height=0") == 8


def ts_write_db(path, items, config, commits):
    kv = u.ts_open(path, config=config)
    chunks = [items[i::commits] for i in range(commits)]
    for chunk in chunks:
        txn = ts.Transaction()
        kvt = kv.with_transaction(txn)
        for k, v in chunk:
            kvt.write(k, v).result()
        txn.commit_sync()
    return kv


@pytest.mark.parametrize("compression", [{"id": "zstd"}, None])
def test_c_reads_tensorstore_written(tmp_path, tool, unroll_bin, compression):
    rng = random.Random(7)
    items = {}
    for i in range(400):
        k = f"dir{i % 7}/sub{i % 13}/key{i:05d}".encode()
        items[k] = rng.randbytes(rng.choice([0, 3, 40, 200, 5000]))
    items = sorted(items.items())
    config = {"max_decoded_node_bytes": 1, "max_inline_value_bytes": 32,
              "version_tree_arity_log2": 1, "compression": compression}
    db = tmp_path / "ts.ocdbt"
    kv = ts_write_db(db, items, config, commits=9)
    # a later commit overwrites and deletes some keys
    kv.write(items[0][0], b"overwritten").result()
    kv.delete_range(ts.KvStore.KeyRange(inclusive_min=items[1][0],
                                           exclusive_max=items[1][0] + b"\0")).result()
    expected = u.ts_dump(db)
    assert len(expected) == len(items) - 1
    assert u.c_dump(db) == expected
    assert root_height(unroll_bin, db) >= 3
    manifest = run_ls(unroll_bin, "--manifest", db).stdout
    assert b"version_node" in manifest  # versions spilled out of the manifest
    assert any(len(v) > 32 for _, v in expected)  # indirect values present
    # prefix listing matches TensorStore's prefix listing
    prefix = b"dir3/sub5/"
    ts_keys = sorted(k for k in u.ts_open(db).list(ts.KvStore.KeyRange(
        inclusive_min=prefix, exclusive_max=b"dir3/sub50")).result())
    assert run_ls(unroll_bin, db, prefix.decode()).stdout.split() == ts_keys


def test_c_reads_numbered_manifest(tmp_path, tool):
    db = tmp_path / "numbered.ocdbt"
    items = [(f"k{i}".encode(), f"v{i}".encode() * 50) for i in range(50)]
    try:
        ts_write_db(db, items, {"manifest_kind": "numbered", "max_decoded_node_bytes": 64},
                    commits=3)
    except Exception as e:  # noqa: BLE001 - the oracle must support it for this test
        pytest.fail(f"tensorstore cannot write a numbered manifest: {e}")
    assert any(p.name.startswith("manifest.0") for p in db.iterdir())
    assert u.c_dump(db) == u.ts_dump(db)


# ---- (b) TensorStore reads what C wrote ----

def test_tensorstore_reads_c_written_100k(tmp_path, tool, unroll_bin):
    rng = random.Random(11)
    items = [(f"params/layer{i % 97:03d}/w{i:07d}".encode(), rng.randbytes(i % 40))
             for i in range(100_000)]
    big = [(f"big/{j}".encode(), rng.randbytes((3 << 20) + j * 1000)) for j in range(3)]
    mid = [(f"mid/{j}".encode(), rng.randbytes(1025 + j)) for j in range(50)]
    allitems = items + big + mid
    rng.shuffle(allitems)
    db = tmp_path / "c100k.ocdbt"
    u.c_write(db, allitems, "--max-node", 65536)
    expected = sorted(allitems)
    assert u.ts_dump(db) == expected
    assert u.c_dump(db) == expected
    assert root_height(unroll_bin, db) >= 1


@pytest.mark.parametrize("args", [
    ("--max-node", 1, "--max-inline", 4, "--raw"),
    ("--max-node", 200, "--max-inline", 0, "--target-size", 5000),
    ("--max-node", 100000000, "--max-inline", 1024),
    # past 4 KiB of held inline values the writer stores small values indirectly
    ("--max-node", 65536, "--max-inline", 1024, "--max-held", 4096),
])
def test_tensorstore_reads_c_written_shapes(tmp_path, tool, unroll_bin, args):
    rng = random.Random(3)
    items = {f"a/{rng.randrange(10**6):06d}/{'x' * (i % 5)}".encode(): rng.randbytes(i % 300)
             for i in range(2000)}
    items[b""] = b"empty key"
    items[b"z" * 300] = b"long key"
    items = sorted(items.items())
    db = tmp_path / "shape.ocdbt"
    u.c_write(db, items, *args)
    assert u.ts_dump(db) == items
    assert u.c_dump(db) == items
    if args[1] == 1:
        assert root_height(unroll_bin, db) >= 3
    if "--target-size" in args:
        assert len(list((db / "d").iterdir())) > 3


def test_c_written_empty_and_duplicates(tmp_path, tool):
    empty = tmp_path / "empty.ocdbt"
    u.c_write(empty, [])
    assert u.ts_dump(empty) == []
    assert u.c_dump(empty) == []
    dup = tmp_path / "dup.ocdbt"
    u.c_write(dup, [(b"k", b"1"), (b"j", b"x" * 2000), (b"k", b"2"), (b"j", b"y")])
    assert u.ts_dump(dup) == [(b"j", b"y"), (b"k", b"2")]


def test_tensorstore_appends_to_c_written(tmp_path, tool):
    db = tmp_path / "append.ocdbt"
    items = [(f"k{i:04d}".encode(), bytes([i % 256]) * (i * 7)) for i in range(500)]
    u.c_write(db, items, "--max-node", 1000)
    kv = u.ts_open(db)
    kv.write(b"k0001", b"new").result()
    kv.write(b"zz", b"added").result()
    expected = u.ts_dump(db)
    assert (b"zz", b"added") in expected
    assert u.c_dump(db) == expected


def _generations(db):
    """(latest generation, heights of the manifest's version nodes), from TensorStore's dump."""
    m = ts.ocdbt.dump(ts.KvStore.open(f"file://{db}/").result()).result()
    return m["versions"][-1]["generation_number"], [n["height"] for n in m["version_tree_nodes"]]


def test_generations_added_in_turn_with_tensorstore(tmp_path, tool):
    """Issue 16: the C writer continues a database (ur_ocdbt_resume) one generation per commit
    and TensorStore the C writer's, in turn, at arity 2 (version_tree_arity_log2 1), so the
    version tree grows five levels: every generation stays readable by TensorStore, each the
    one before plus its key."""
    db = tmp_path / "gens.ocdbt"
    kv = u.ts_open(db, config={"version_tree_arity_log2": 1})
    for i in range(3):  # generation 1 is TensorStore's empty first commit
        kv.write(f"t{i}".encode(), f"ts {i}".encode()).result()
    items = [(f"c{i:03d}".encode(), bytes([i]) * (i * 40)) for i in range(40)]
    u.c_write(db, items, "--resume", "--commit-every", 1)
    latest, heights = _generations(db)
    assert latest == 44 and heights == [4, 3, 2, 1], (latest, heights)
    u.ts_open(db).write(b"zz", b"after").result()      # TensorStore extends the C tree
    u.c_write(db, [(b"d1", b"x"), (b"d2", b"y" * 3000)], "--resume", "--commit-every", 1)
    latest, heights = _generations(db)
    assert latest == 47 and heights == [4, 3, 2, 1], (latest, heights)
    before = set()
    for g in range(1, latest + 1):
        keys = set(u.ts_open(db, version=g).list().result())
        assert before < keys or g == 1, g
        assert len(keys) == g - 1, (g, len(keys))
        before = keys
    assert u.c_dump(db) == u.ts_dump(db)
