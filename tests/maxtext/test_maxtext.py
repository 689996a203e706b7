"""The released maxtext package in the loop: per family, a tiny model trained 2 steps by real
MaxText, converted by unroll, checked against MaxText's own `scan_layers=false` model tree and
decoded by MaxText's inference engine (driver.py does the work in a subprocess per family);
the non-parameter variables MaxText runs with (DeepSeek's router bias) are the trained ones;
other storage formats (driver.VARIANTS) decode the same, and equal MaxText's own output in that
format bit for bit. test_maxtext_converter runs MaxText's own generate_param_only_checkpoint on
the same states (once, cached) and asserts what it does as observed (driver.MAXTEXT_OUTCOME):
bit for bit unroll's output where it is valid, its failures where it is not.

Run by the Python 3.12 venv .venv-maxtext (scripts/setup.sh --tests), with UNROLL_BIN set;
scripts/test.sh runs it. Tolerance: the unrolled model runs the same bf16 values through the
same float32 ops as the scanned one, only not inside a scan; tokens must be equal and logits
within LOGITS_ATOL (0 observed on llama2; XLA may fuse the two graphs differently).
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import re
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
import driver  # noqa: E402

LOGITS_ATOL = 1e-4


@pytest.fixture(scope="session", autouse=True)
def _environment():
    # Missing pieces fail the suite (never a skip): CI must notice.
    bin_ = os.environ.get("UNROLL_BIN")
    assert bin_ and os.access(bin_, os.X_OK), "UNROLL_BIN must name the built unroll binary"
    assert sys.version_info[:2] == (3, 12), "tests/maxtext runs in .venv-maxtext (Python 3.12)"


# family -> Future of its driver run (facts dict, or the failure text)
_FACTS: dict = {}


def _run_driver(family: str, work: pathlib.Path):
    p = subprocess.run([sys.executable, str(HERE / "driver.py"), family, str(work)],
                       capture_output=True, text=True)
    facts_file = work / "facts.json"
    return (json.loads(facts_file.read_text()) if p.returncode == 0 and facts_file.exists()
            else f"driver {family} failed (rc {p.returncode}):\n{p.stderr[-4000:]}")


@pytest.fixture(scope="session", autouse=True)
def _drivers(request, tmp_path_factory):
    """Every selected family's driver, started up front, UNROLL_MAXTEXT_JOBS (default: the CPU
    count, at most 4) at a time in the order the tests ask for them: a driver is one Python
    process that spends most of its time in single-threaded XLA compiles, so two of them on two
    cores take about half the wall time of one after the other (the suite is most of CI's)."""
    families = []
    for item in request.session.items:
        fam = getattr(getattr(item, "callspec", None), "params", {}).get("family")
        if fam is not None and fam not in families:
            families.append(fam)
    jobs = int(os.environ.get("UNROLL_MAXTEXT_JOBS") or min(os.cpu_count() or 1, 4))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for fam in families:
            _FACTS[fam] = pool.submit(_run_driver, fam, tmp_path_factory.mktemp(fam))
        yield
        for fut in _FACTS.values():
            fut.cancel()


def _facts(family: str, tmp_path_factory) -> dict:
    """The driver's facts for a family: gathered once per session, shared by the tests below."""
    if family not in _FACTS:
        fut = concurrent.futures.Future()
        fut.set_result(_run_driver(family, tmp_path_factory.mktemp(family)))
        _FACTS[family] = fut
    facts = _FACTS[family].result()
    if isinstance(facts, str):
        pytest.fail(facts)
    return facts


@pytest.mark.parametrize("family", sorted(driver.FAMILIES))
def test_family(family, tmp_path_factory):
    f = _facts(family, tmp_path_factory)
    assert f["unrolled"]["rc"] == 0, f["unrolled"]["stderr"]
    assert f["scanned"]["rc"] == 0, f["scanned"]["stderr"]
    assert f["verify"]["rc"] == 0, f["verify"]["stdout"] + f["verify"]["stderr"]
    # the unscanned output is exactly the tree MaxText's scan_layers=false model restores
    model, out = f["model_tree"], f["unrolled_tree"]
    assert sorted(set(model) - set(out)) == [], "leaves the model needs, missing from unroll's output"
    assert sorted(set(out) - set(model)) == [], "leaves in unroll's output the model does not have"
    assert {k: v for k, v in out.items() if model[k] != v} == {}
    # the output says it is unscanned where MaxText reads it back (its scanned param-only
    # output, scanned), and MaxText's decode, given no scan_layers flag, took it from there
    assert f["unrolled_metadata"] == {"scan_layers": False}
    if family not in driver.PIPELINE:  # there the reference is the test's own restacked tree
        assert f["scanned_metadata"] == {"scan_layers": True}
    if family in driver.UNTRAINABLE:
        _check_untrainable(family, f)
        return
    # same tokens, same logits, from the unscanned output as from the scanned one
    du, ds = f["decode_unrolled"], f["decode_scanned"]
    assert du["scan_layers"] is False and ds["scan_layers"] is True
    assert du["tokens"] == ds["tokens"]
    a, b = np.asarray(du["logits"]), np.asarray(ds["logits"])
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=0, atol=LOGITS_ATOL)
    # the parallel runs really are: arrays sharded over the mesh axes they name
    if family in driver.PIPELINE:
        assert f["mesh_axes_used"].get("stage", 0) > 0, f["mesh_axes_used"]
        _check_pipeline_groups(family, f)
    if family == "fsdp-tensor":
        assert f["mesh_axes_used"].get("fsdp", 0) > 0 and f["mesh_axes_used"].get("tensor", 0) > 0, \
            f["mesh_axes_used"]
    # non-parameter variables (DeepSeek's router bias): MaxText runs with the trained values
    _check_aux(family, f)
    if family in driver.MTP:
        _check_mtp(family, f)
    if family in driver.MULTIMODAL:
        _check_vision(f)
    # other storage formats of the same output: what MaxText restores and decodes alike
    for name, v in f["variants"].items():
        assert v["rc"] == 0, v["stderr"]
        if name == "zarr2-no-ocdbt":
            assert v["storage"] == {"ocdbt": False, "zarr2": True, "zarr3": False}
        assert v["tree"] == model
        assert v["decode"]["scan_layers"] is False and v["decode"]["tokens"] == ds["tokens"]
        np.testing.assert_allclose(np.asarray(v["decode"]["logits"]), b, rtol=0, atol=LOGITS_ATOL)
        # MaxText's own converter writes the same format, and the same bits
        assert v["maxtext"]["rc"] == 0, v["maxtext"]["stderr"]
        assert v["maxtext"]["storage"] == v["storage"]
        assert v["maxtext"]["differences"] == {}
        assert v["maxtext"]["leaves_compared"] == len(model)


# Each pipeline family's training state as MaxText 0.2.5 writes it: the leading axes of the
# stack decoder/pipeline_module ([repeats, stages], or [stages] for one repeat) and the other
# scanned groups with their layer counts (param_scan_axis 1).
PIPELINE_STACK = {"pipeline": [2, 2], "pipeline-remainder": [2, 2], "deepseek-pipeline": [2]}
PIPELINE_GROUPS = {"pipeline": {},
                   "pipeline-remainder": {"layers_outside_pipeline": 2},
                   "deepseek-pipeline": {"dense_layers": 1, "moe_layers_outside_pipeline": 2}}


def _check_pipeline_groups(family: str, f: dict) -> None:
    """The state really holds the layout the family names: a pipeline stack and, for the
    remainder families, the groups outside it (so that the decodes above exercise them); and
    the pipelined model's own forward pass gives the logits of the unscanned model from unroll's
    output, where a copy of that output with two layers swapped does not (driver.
    pipeline_forward)."""
    groups: dict = {}
    for k, v in f["trained_tree"].items():
        p = k.split("/")
        if p[0] == "decoder" and len(p) > 2:
            if p[1] == "pipeline_module":
                groups.setdefault(p[1], set()).add(tuple(v[:len(PIPELINE_STACK[family])]))
            elif p[1] not in ("decoder_norm", "logits_dense"):
                groups.setdefault(p[1], set()).add(v[1])
    assert groups.pop("pipeline_module") == {tuple(PIPELINE_STACK[family])}
    assert groups == {g: {n} for g, n in PIPELINE_GROUPS[family].items()}, groups
    fw = f["pipeline_forward"]
    pipelined, unrolled = np.asarray(fw["pipelined"]), np.asarray(fw["unrolled"])
    assert pipelined.shape == (2, 16, 128) and np.all(np.isfinite(pipelined))
    np.testing.assert_allclose(unrolled, pipelined, rtol=0, atol=LOGITS_ATOL)
    assert np.abs(np.asarray(fw["swapped"]) - pipelined).max() > 100 * LOGITS_ATOL, \
        f"swapping {fw['swapped_layers']} does not change the logits: the check cannot fail"
    # unroll verify, the planner's oracle, catches the swap and a missing layer (exit 6), and
    # names them in the output's own names
    first, last = fw["swapped_layers"]
    vs, vm = fw["verify_swapped"], fw["verify_missing"]
    assert vs["rc"] == 6 and f"mismatch: leaf 'decoder/{first}/" in vs["stdout"], vs
    assert vm["rc"] == 6 and f"missing: leaf 'decoder/{last}/" in vm["stdout"], vm


def _check_untrainable(family: str, f: dict) -> None:
    """DeepSeek Engram (driver.UNTRAINABLE): MaxText 0.2.5 cannot train it on CPU, nor decode
    the scanned model with MaxEngine (the same tracer leaked from engram.py's
    CompressedTokenizer), so the state is the one MaxText's own code wrote from its eagerly
    initialised modules, and the scanned reference is MaxText's forward pass on it. The
    unscanned model has no Engram: the Engram weights are not in unroll's output (the tree
    check above), and with the Engram layers' value projections zero (driver.ENGRAM_VALUE_PROJ)
    both models compute the same logits."""
    attempt = f["train_attempt"]
    assert attempt["rc"] != 0 and attempt["checkpoints"] == [], \
        "MaxText now trains Engram on CPU: convert its training state instead"
    assert attempt["error"].startswith(driver.UNTRAINABLE[family]), attempt["error"]
    ds = f["decode_scanned"]
    assert not ds["ok"], "MaxEngine now decodes the scanned Engram model: compare its decodes"
    assert ds["error"].startswith(driver.UNTRAINABLE_DECODE_ERROR), ds["error"]
    # the input has the Engram weights the output leaves out, and the run says how many
    left_out = [k for k in f["scanned_tree"] if re.search(r"_engram_\d+/engram(_layer_norm)?/", k)]
    assert left_out and not any("engram" in k for k in f["unrolled_tree"])
    assert f"note: base: {len(left_out)} model leaves not written (Engram:" in f["unrolled"]["stderr"]
    # MaxEngine decodes the unscanned output (no Engram there, nothing leaks)
    du = f["decode_unrolled"]
    assert du["scan_layers"] is False and len(du["tokens"]) == 5
    assert np.all(np.isfinite(np.asarray(du["logits"])))
    # the scanned model on MaxText's state and the unscanned one on unroll's output: every
    # parameter set from the checkpoint, the same next tokens, the same logits
    fs, fu = f["forward_scanned"], f["forward_unrolled"]
    assert fs["params_set"] == fs["params_stored"] and fu["params_set"] == fu["params_stored"]
    assert fu["argmax"] == fs["argmax"]
    a, b = np.asarray(fu["logits"]), np.asarray(fs["logits"])
    assert np.all(np.isfinite(a)) and np.any(a != 0)
    np.testing.assert_allclose(a, b, rtol=0, atol=LOGITS_ATOL)
    # with non-zero value projections the Engram changes the scanned model's logits: what
    # leaving its weights out costs a model whose Engram was trained
    c = np.asarray(f["forward_scanned_engram"]["logits"])
    assert np.max(np.abs(c - b)) > 100 * LOGITS_ATOL
    assert f["trained_aux"] == {}
    # the chunks under a config without engram_layers: one line naming the stack, exit 2
    r = f["refused"]
    assert r["rc"] == 2 and "\n" not in r["stderr"], r
    assert re.search(r"decoder/(dense|moe)_layers_(\d+_\d+|engram_\d+): the checkpoint has DeepSeek "
                     r"Engram layer chunks but the config has no engram_layers", r["stderr"]), r


def _check_mtp(family: str, f: dict) -> None:
    """Multi-token prediction: the MTP layer is built from get_decoder_layers()[-1] (models.py).
    DeepSeek: the same layer class scanned or not, so the training state's MTP block is already
    the unscanned model's. gemma4: the scanned model's MTP transformer layer is a whole
    Gemma4ScannableBlock (5 local layers stacked on axis 1, a global layer), the unscanned
    model's one local layer (what the tree comparison above checked unroll wrote, and verify
    that its values are local layer 0's). MaxEngine cannot decode with the MTP block from
    either output (driver.MTP), so the decodes compared above ran the main model alone."""
    model = driver.mtp_subtree(f["model_tree"])
    trained = f["trained_mtp"]
    assert model and trained, "the MTP block is missing from the model or the training state"
    layer = "mtp_block/mtp_layer_1/mtp_1_transformer_layer/"
    if family == "deepseek-mtp":
        assert trained == model
    else:
        local = {k.replace("local_layers/", "", 1): v[:1] + v[2:] for k, v in trained.items()
                 if k.startswith(layer + "local_layers/")}
        assert {v[1] for k, v in trained.items() if k.startswith(layer + "local_layers/")} == {5}
        assert any(k.startswith(layer + "global_layer/") for k in trained)
        assert not any(k.startswith((layer + "local_layers/", layer + "global_layer/"))
                       for k in model)
        # the unscanned MTP layer is shaped like one of the block's local layers
        assert local == {k: v for k, v in model.items() if k.startswith(layer)}
        # the MTP layer's own norms and projection are the same in both
        assert {k: v for k, v in trained.items() if not k.startswith(layer)} == \
            {k: v for k, v in model.items() if not k.startswith(layer)}
    for which in ("unrolled", "scanned"):
        d = f["decode_mtp"][which]
        assert not d["ok"], "MaxEngine now decodes with the MTP block: compare those decodes"
        assert d["error"] == driver.MTP_DECODE_ERROR, d["error"]


def _check_vision(f: dict) -> None:
    """Multimodal: the vision encoder is carried through as it is. MaxText 0.2.5 builds its
    layers as separate submodules whether or not scan_layers is set (no scanned vision encoder),
    so the scan_layers=true and =false models hold the same vision subtree, the training state
    holds it too (its num_hidden_layers_for_vit=2 layers apart), and unroll's output holds each
    trained value cast to bfloat16, bit for bit. MaxEngine decodes a prompt with an image from
    both outputs alike (driver.image_decodes), and another image changes the logits."""
    v = f["vision"]
    model = {k[len("vision_encoder/"):-len("/value")]: s for k, s in f["model_tree"].items()
             if k.startswith("vision_encoder/")}
    scanned = {k[len("vision_encoder/"):-len("/value")]: s for k, s in v["scanned_model"].items()}
    assert model and model == scanned
    assert v["trained"] == model
    layers = {p for k in model for p in k.split("/") if re.fullmatch(r"(encoderblock|layers)_\d+", p)}
    assert len(layers) == 2, layers
    assert v["trained_dtypes"] == ["float32"]
    assert v["compared"] == len(model) and v["differ"] == []
    d = f["decode_image"]
    du, ds, other = d["unrolled"], d["scanned"], d["other_image"]
    assert du["scan_layers"] is False and ds["scan_layers"] is True
    assert du["tokens"] == ds["tokens"]
    a, b = np.asarray(du["logits"]), np.asarray(ds["logits"])
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=0, atol=LOGITS_ATOL)
    assert np.max(np.abs(np.asarray(other["logits"][0]) - a[0])) > 1e-3, \
        "the image does not reach the logits: the vision encoder's weights go untested"


def _unstacked(trained: dict, model: dict, family: str) -> dict:
    """The trained non-parameter variables as the unscanned model holds them: a leaf of scanned
    group decoder/<g> (stacked on axis 0) becomes decoder/<g>_<i>, one row each; deepseek4's
    decoder/scanned_blocks/layers_<j> (blocks of 2 after the hash layers) decoder/layers_<h+2b+j>."""
    out = {}
    hash_layers = [int(a.split("=")[1]) for a in driver.ALL[family]
                   if a.startswith("first_num_hash_layers=")]
    for k, v in trained.items():
        p = k.split("/")
        if len(p) > 3 and p[:2] == ["decoder", "scanned_blocks"] and hash_layers:
            j = int(p[2].split("_")[1])
            for b, row in enumerate(v):
                out["/".join(["decoder", f"layers_{hash_layers[0] + 2 * b + j}", *p[3:]])] = row
        elif len(p) > 2 and p[0] == "decoder" and any(m.startswith(f"decoder/{p[1]}_0/") for m in model):
            for i, row in enumerate(v):
                out["/".join(["decoder", f"{p[1]}_{i}", *p[2:]])] = row
        else:
            out[k] = v
    return out


def _check_aux(family: str, f: dict) -> None:
    trained = f["trained_aux"]
    for key in driver.EDITS.get(family, []):
        k = key.split("/", 2)[2]
        assert np.any(np.asarray(trained[k]) != 0), \
            f"{k} must be non-zero to tell a loaded value from an initialised one"
    assert f["decode_scanned"]["aux"] == trained
    assert f["decode_unrolled"]["aux"] == _unstacked(trained, f["model_tree"], family)



@pytest.mark.parametrize("family", sorted(driver.MAXTEXT_OUTCOME))
def test_maxtext_converter(family, tmp_path_factory):
    """What MaxText's own generate_param_only_checkpoint makes of the same training state, as the
    README states it (driver.MAXTEXT_OUTCOME): bit for bit unroll's output where it is valid, and
    the failure observed where it is not, while unroll's output of the same state loads and
    decodes like the scanned model (test_family). Fails when MaxText changes: then the README's
    claim must change too."""
    f = _facts(family, tmp_path_factory)
    outcome = driver.MAXTEXT_OUTCOME[family]
    if outcome == "untrainable":
        # no training state: MaxText's training fails (test_family checks it and the rest)
        # ... and MaxText's converter was not run (f["maxtext"] stays the package version)
        assert f["train_attempt"]["rc"] != 0 and f["maxtext"] == driver.maxtext.__version__
        assert f["train_attempt"]["error"].startswith(driver.UNTRAINABLE[family])
        return
    m = f["maxtext"]
    # unroll's output of this state is the working one (what test_family checks in full)
    assert f["unrolled"]["rc"] == 0 and f["decode_unrolled"]["tokens"] == f["decode_scanned"]["tokens"]
    if outcome == "fails":
        assert m["rc"] != 0, "MaxText's converter now succeeds: check its output, fix the README"
        assert m["error"] == MAXTEXT_ERRORS[family]
        return
    assert m["rc"] == 0, m["stderr"]
    if outcome == "valid":
        assert m["differences"] == {}
        assert m["leaves_compared"] == len(f["model_tree"])
        return
    assert m["n_differences"] > 0, "MaxText's output now equals unroll's: fix the README"
    if outcome == "drops-aux":
        # the same params, bit for bit, without the trained router bias that unroll keeps ...
        aux = {f"{k}/value": "only in unroll's" for k in f["decode_unrolled"]["aux"]}
        assert aux and m["differences"] == aux and m["n_differences"] == len(aux)
        assert m["leaves_compared"] == len(f["model_tree"]) - len(aux)
        # ... and MaxEngine, run from its output, crashes on the missing variable
        assert not m["decode"]["ok"], "MaxEngine now runs from MaxText's output: fix the README"
        assert m["decode"]["error"] == "RuntimeError: Array has been deleted with shape=bfloat16[4]."
        return
    # the blocks' own layers stay nested under the unrolled block axis ...
    model, theirs = f["model_tree"], m["tree"]
    nested = [k for k in theirs if re.match(r"decoder/layers_\d+/(layers_\d+|local_layers|global_layer)/", k)]
    assert nested and not set(nested) & set(model)
    # ... the slices past the blocks are NaN ...
    assert m["non_finite"] == {"nan_groups": MAXTEXT_NAN[family], "other": []}
    # ... and MaxText's own engine refuses what its own converter wrote
    assert not m["decode"]["ok"], "MaxEngine now loads MaxText's output: fix the README"
    assert m["decode"]["error"].startswith("ValueError: Checkpoint structure mismatch:"), \
        m["decode"]["error"]


# As observed with maxtext 0.2.5: the last exception line of MaxText's converter where it fails,
# and the groups of its output that are NaN throughout (the slices past the stacked blocks).
MAXTEXT_ERRORS = {
    "pipeline": "ValueError: Missing layers in NNX state.model.decoder or state_mesh_shardings.",
    "pipeline-remainder": "ValueError: Missing layers in NNX state.model.decoder or "
                          "state_mesh_shardings.",
    "deepseek-pipeline": "ValueError: Missing moe_layers in NNX state.model.decoder or "
                         "state_mesh_shardings.",
    "gemma4": "ValueError: Missing layers in NNX state.model.decoder or state_mesh_shardings.",
    "deepseek4": "ValueError: Missing layers in NNX state.model.decoder or state_mesh_shardings.",
}
MAXTEXT_NAN = {
    "gemma3": [f"decoder/layers_{i}" for i in range(1, 7)],      # 7 layers: 1 block of 6 (+1)
    "qwen3-next": [f"decoder/layers_{i}" for i in range(1, 6)],  # 6 layers: 1 block of 4 (+2)
    "llama4": [f"decoder/layers_{i}" for i in range(1, 4)],      # 4 layers: 1 block of 4
    "gpt-oss": [f"decoder/layers_{i}" for i in range(2, 4)],     # 4 layers: 2 blocks of 2
    "olmo3": [f"decoder/layers_{i}" for i in range(1, 4)],       # 4 layers: 1 block of 4
}


def test_maxtext_lora_blocked(tmp_path):
    """LoRA cannot go through maxtext 0.2.5 (README, "LoRA through MaxText"), as observed: its
    pre-training accepts LoRA keys but saves no adapter (nor the base), and its engine cannot
    load any adapter. Fails when either changes: then a LoRA round trip (MaxText-trained adapter,
    unroll's LoRA mode, MaxEngine) belongs here instead."""
    p = subprocess.run([sys.executable, str(HERE / "driver.py"), "lora-blockers", str(tmp_path)],
                       capture_output=True, text=True)
    facts_file = tmp_path / "facts.json"
    assert p.returncode == 0 and facts_file.exists(), p.stderr[-4000:]
    f = json.loads(facts_file.read_text())
    assert f["lora_config"]["enable_lora"] is True and f["lora_config"]["lora_rank"] == 4
    assert f["lora_pretrain_tree"] == {"step": []}, "MaxText's pre-training now saves LoRA weights"
    assert f["unroll"]["rc"] == 0, f["unroll"]["stderr"]
    assert not f["load_single_adapter"]["ok"], "MaxEngine now loads adapters: test unroll's"
    assert f["load_single_adapter"]["error"] == \
        "ValueError: Unexpected leaf type Param at .decoder.decoder_norm.scale"


def test_maxtext_mtp_unscanned_blocked(tmp_path):
    """Multi-token prediction with gpt-oss and qwen3-next (no training): MaxText 0.2.5 builds the
    scanned model's MTP layer as a whole scannable block, and cannot build the unscanned model at
    all (the layer class needs an argument MultiTokenPredictionLayer does not pass), so no
    unscanned checkpoint of them can be loaded and unroll refuses them (exit 5; interop
    test_gemma4_mtp_layer, unit test_plan__mtp_layer). Fails when MaxText changes: then those
    families' mapping belongs in unroll."""
    p = subprocess.run([sys.executable, str(HERE / "driver.py"), "mtp-blockers", str(tmp_path)],
                       capture_output=True, text=True)
    facts_file = tmp_path / "facts.json"
    assert p.returncode == 0 and facts_file.exists(), p.stderr[-4000:]
    f = json.loads(facts_file.read_text())
    layer = "mtp_block/mtp_layer_1/mtp_1_transformer_layer/"
    for fam, error in driver.MTP_BLOCKED.items():
        scanned = f[fam]["scanned"]
        assert scanned["ok"], scanned
        # the scanned MTP layer holds the block's sub-layers (gpt-oss layers_0, layers_1;
        # qwen3-next local_layers, global_layer)
        subs = {k[len(layer):].split("/")[0] for k in scanned["tree"] if k.startswith(layer)}
        assert subs in ({"layers_0", "layers_1"}, {"local_layers", "global_layer"}), subs
        assert f[fam]["unscanned"] == {"ok": False, "error": error}, f[fam]["unscanned"]
