"""The real client: transformers loads a Hugging Face folder unroll wrote and computes logits.

    .venv-hf/bin/python tests/hf/hf_client.py <folder> <tokens json> <out json> [<image .npy>]

Loads the folder with AutoModelForCausalLM (CPU, float32 compute whatever the stored dtype, no
network: HF_HUB_OFFLINE), runs the token ids through it once, and writes {"logits": [...],
"argmax": [...], "architecture": ..., "dtype": ...} (logits flattened, float32), or
{"error": "<the exception's first line>"} when transformers refuses the folder. With an image
([height, width, channels], float32 pixel values as the model takes them), also the image's
features as the model's vision tower and projector compute them ("image_features": the soft
tokens [tokens, hidden], flattened), and "missing": the weights transformers had to make up."""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def main() -> None:
    folder, tokens, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    image = sys.argv[4] if len(sys.argv) > 4 else None
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        cfg = AutoConfig.from_pretrained(folder)
        model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                           output_loading_info=True)
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([tokens], dtype=torch.long)).logits[0].float().numpy()
        res = {"logits": logits.reshape(-1).tolist(), "argmax": logits.argmax(-1).tolist(),
               "shape": list(logits.shape), "architecture": type(model).__name__,
               "dtype": str(next(model.parameters()).dtype),
               "config_architectures": cfg.architectures,
               "missing": sorted(info.get("missing_keys", []))}
        if image is not None:
            import numpy as np
            pixels = torch.from_numpy(np.load(image)).permute(2, 0, 1)[None]  # [1, C, H, W]
            with torch.no_grad():
                feats = model.model.get_image_features(pixel_values=pixels)
            feats = getattr(feats, "pooler_output", feats)
            feats = feats[0] if isinstance(feats, (tuple, list)) else feats
            feats = feats.reshape(-1, feats.shape[-1]).float().numpy()
            res["image_features"] = feats.reshape(-1).tolist()
            res["image_features_shape"] = list(feats.shape)
    except Exception as e:  # noqa: BLE001 - what transformers raises is the result
        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:500] if str(e) else ''}"}
    with open(out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
