"""The output describes itself where MaxText reads it back (issue 26, item 1).

MaxText 0.2.5 records `custom_metadata: {"scan_layers": <bool>}` in a training step's
`_CHECKPOINT_METADATA`, and when it loads `load_parameters_path` (`<step>/items`) it reads that
file of the step directory back (`checkpointing.load_checkpoint_metadata`): a recorded
scan_layers sets the flag by itself, one that contradicts an explicit flag is refused. So
unroll's output records scan_layers false (true for a scanned param-only output), and the
input's other custom_metadata members (MaxText's "lora", ...) as the input wrote them, for a
single process and for the finish of several. tests/maxtext checks MaxText's own reading of it.
"""
import json
import pathlib
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tests" / "data" / "example"
CONFIG = EXAMPLE / "unroll.yml"

# what a LoRA training run of MaxText records, with a float that must stay one ("16.0", not
# "16"), a non-ASCII value and an escaped key
RECORDED = ('{"scan_layers": true, "lora": {"enable_lora": true, "lora_rank": 4, '
            '"lora_alpha": 16.0, "lora_module_path": "decoder/layers/.*"}, '
            '"note": "\u00e9t\u00e9", "a\\"b": [1, 2.50]}')


def _input(tmp_path, custom=None) -> pathlib.Path:
    """The example's step 9, with `custom` as its recorded custom_metadata text."""
    step = tmp_path / "in" / "9"
    shutil.copytree(EXAMPLE / "checkpoints" / "9", step)
    if custom is not None:
        meta = json.loads((step / "_CHECKPOINT_METADATA").read_text())
        text = json.dumps(meta)
        old = '"custom_metadata": {}'
        assert old in text
        (step / "_CHECKPOINT_METADATA").write_text(text.replace(old, f'"custom_metadata": {custom}'))
    return step / "items"


def _convert(unroll_bin, items, out, *extra, processes=1):
    """The output step's _CHECKPOINT_METADATA text, from `processes` processes."""
    shares = [["--process-count", str(processes), "--process-index", str(i)]
              for i in range(processes)] if processes > 1 else [[]]
    procs = [subprocess.Popen(
        [str(unroll_bin), str(CONFIG), "-q", "-j1", *share, f"load_full_state_path={items}",
         f"base_output_directory={out}", "run_name=run", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for share in shares]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return (out / "run" / "checkpoints" / "0" / "_CHECKPOINT_METADATA").read_text()


def _custom(text: str) -> str:
    """The custom_metadata member's text as written."""
    at = text.index('"custom_metadata": ') + len('"custom_metadata": ')
    assert text.endswith("}")
    return text[at:-1]


def test_plain_run_records_unscanned(unroll_bin, tmp_path):
    meta = json.loads(_convert(unroll_bin, EXAMPLE / "checkpoints" / "9" / "items",
                               tmp_path / "out", "force_unroll=true"))
    assert meta["custom_metadata"] == {"scan_layers": False}


def test_scanned_param_only_records_scanned(unroll_bin, tmp_path):
    meta = json.loads(_convert(unroll_bin, EXAMPLE / "checkpoints" / "9" / "items",
                               tmp_path / "out", "force_unroll=false"))
    assert meta["custom_metadata"] == {"scan_layers": True}


def test_other_members_carried_as_written(unroll_bin, tmp_path):
    items = _input(tmp_path, RECORDED)
    text = _convert(unroll_bin, items, tmp_path / "out", "force_unroll=true")
    custom = _custom(text)
    # scan_layers first and false, the rest byte for byte as the input wrote it
    assert custom == RECORDED.replace('"scan_layers": true', '"scan_layers": false')
    assert json.loads(custom)["lora"]["lora_alpha"] == 16.0
    assert isinstance(json.loads(custom)["lora"]["lora_alpha"], float)


def test_two_processes_record_the_same(unroll_bin, tmp_path):
    items = _input(tmp_path, RECORDED)
    one = _custom(_convert(unroll_bin, items, tmp_path / "one", "force_unroll=true"))
    two = _custom(_convert(unroll_bin, items, tmp_path / "two", "force_unroll=true",
                           processes=2))
    assert two == one
