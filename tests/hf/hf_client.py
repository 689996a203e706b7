"""The real client: transformers loads a Hugging Face folder unroll wrote and computes logits.

    .venv-hf/bin/python tests/hf/hf_client.py <folder> <tokens json> <out json>

Loads the folder with AutoModelForCausalLM (CPU, float32 compute whatever the stored dtype, no
network: HF_HUB_OFFLINE), runs the token ids through it once, and writes {"logits": [...],
"argmax": [...], "architecture": ..., "dtype": ...} (logits flattened, float32), or
{"error": "<the exception's first line>"} when transformers refuses the folder."""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    folder, tokens, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        cfg = AutoConfig.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0].float().numpy()
        res = {"logits": logits.reshape(-1).tolist(), "argmax": logits.argmax(-1).tolist(),
               "shape": list(logits.shape), "architecture": type(model).__name__,
               "dtype": str(next(model.parameters()).dtype),
               "config_architectures": cfg.architectures}
    except Exception as e:  # noqa: BLE001 - what transformers raises is the result
        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:500] if str(e) else ''}"}
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
