"""Issue 33 baseline on a GPU: peak memory and time of one training step (forward, backward, AdamW) per encoding and
length, batch 1, d_model 768, 4 layers, bf16 autocast; sdpa, and flex where the encoding takes it.

    PYTHONPATH=src python docs/results/gpu_long_memory.py cuda 2048,8192,32768 [BUDGET_S] [NAMES] [sdpa|flex] \
        > out.jsonl
    PYTHONPATH=src python docs/results/gpu_long_memory.py cpu 64,128     # a smoke run
"""

import json
import statistics
import sys
import time

import torch

import posformer as pf
from posformer.bench.positions import positions_config
from posformer.positions import registry

device = torch.device(sys.argv[1])
lengths = [int(x) for x in sys.argv[2].split(",")]
budget_s = float(sys.argv[3]) if len(sys.argv) > 3 else 1e9
names = sys.argv[4].split(",") if len(sys.argv) > 4 else registry.usable("decoder")
only_attn = sys.argv[5] if len(sys.argv) > 5 else None
small = device.type == "cpu"
shape = dict(d_model=64, layers=1, heads=4, vocab=256, d_ff=128) if small else dict(
    d_model=768, layers=4, heads=12, vocab=32000, d_ff=2048
)
start = time.time()


def sync() -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step(model, opt, ids) -> None:
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for name in names:
    attns = ["sdpa"] + (["flex"] if device.type == "cuda" and registry.get(name).flex_compatible() else [])
    attns = [a for a in attns if only_attn is None or a == only_attn]
    for attn in attns:
        for length in lengths:
            if time.time() - start > budget_s:
                print(json.dumps({"stopped": "budget", "at": [name, attn, length]}), flush=True)
                sys.exit(0)
            row = {"encoding": name, "attn": attn, "T": length}
            model = opt = None
            try:
                cfg = positions_config(name, "decoder", attn=attn, length=length, **shape)
                torch.manual_seed(0)
                model = pf.Transformer(cfg).to(device)
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
                ids = torch.randint(0, cfg.vocab_size, (1, length), device=device)
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                times = []
                for i in range(3 if length <= 8192 else 2):
                    sync()
                    t0 = time.perf_counter()
                    step(model, opt, ids)
                    sync()
                    times.append(time.perf_counter() - t0)
                row["step_s"] = statistics.median(times[1:]) if len(times) > 1 else times[0]
                if device.type == "cuda":
                    row["peak_gib"] = round((torch.cuda.max_memory_allocated() - base) / 2**30, 3)
            except torch.OutOfMemoryError:
                row["error"] = "OOM"
            except Exception as err:  # noqa: BLE001 - a probe records whatever stops a row
                row["error"] = f"{type(err).__name__}: {str(err)[:160]}"
            del model, opt
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
print(json.dumps({"done_s": round(time.time() - start, 1)}), flush=True)
