"""scripts/gpu/demo35_dataset.py — `gantry bench --dataset` files from demo35's held-out prompts
(tests/golden/demo35/heldout.json: 16 edit prompts, where the answer repeats the prompt's function with
one name changed, and 16 code completions, from files the training never saw).
usage: python3 demo35_dataset.py OUTDIR [OUTPUT_LEN] [COPIES]
writes OUTDIR/edit.jsonl and OUTDIR/completion.jsonl: each prompt COPIES times (default 2, so a
concurrency-32 cell has 32 requests), {"prompt": ..., "output_len": OUTPUT_LEN (default 128)}."""
import json, os, sys

out, n_out = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 128
copies = int(sys.argv[3]) if len(sys.argv) > 3 else 2
here = os.path.dirname(os.path.abspath(__file__))
held = json.load(open(os.path.join(here, "../../tests/golden/demo35/heldout.json")))
os.makedirs(out, exist_ok=True)
for kind in ("edit", "completion"):
    with open(os.path.join(out, kind + ".jsonl"), "w") as f:
        for _ in range(copies):
            for h in held[kind]:
                f.write(json.dumps({"prompt": h["prompt"], "output_len": n_out}) + "\n")
    print(f"{kind}.jsonl: {copies} x {len(held[kind])} prompts, {n_out} tokens each")
