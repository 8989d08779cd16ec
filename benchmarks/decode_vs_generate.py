"""distbench's eager greedy decode next to transformers' own `generate`, same model, same batch.

Both sides decode the same prompts (workload=inference's `prompt_batch`, seed 0) with the same
random-weight model (built as the ranks build it, `ranks.models.build_model`), greedy, exactly
`--new-tokens` new tokens per row, in this one process (world size 1, no torchrun):

- distbench: `workloads.inference.workload.greedy_decode`, the loop each rank of
  `python run.py workload=inference` runs (its own decode timer is kept beside, as
  `own_decode_s`);
- transformers: `model.generate(prompts, attention_mask=..., do_sample=False,
  max_new_tokens=N, min_new_tokens=N)`;
- with `--before`, the workload's loop before it dropped the attention mask.

Each is timed by the same rule, a forward pre-hook on the model (DecodeClock): from the start
of the second forward (the first decode step; the first is the prefill) to its return, in wall
seconds and in this process's CPU seconds (the CPU figure is what to compare on a loaded,
shared host: it leaves out the time other processes took the cores; on a GPU compare the
wall figures). Decode tokens/s =
batch × (N − 1) / decode seconds, the formula of a run's `decode_tokens_per_s`. The decoders
run in turn (each first in turn), `--repeats` times each after a warm-up; the table shows
medians and says whether they all produced the same tokens. On a CPU, `--threads 1` keeps the
figures stable when other processes share the cores.

    .venv/bin/python benchmarks/decode_vs_generate.py --threads 1 --before   # tiny, gpt2_124m
    .venv/bin/python benchmarks/decode_vs_generate.py --quick          # smoke: tiny, 2 repeats
    .venv/bin/python benchmarks/decode_vs_generate.py --models llama_1b --device cuda \\
        --dtype bf16 --batch-size 4 --prompt-len 512 --new-tokens 64

Results go to benchmarks/results/decode_vs_generate.json (git-ignored); the last stdout line is
one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR / "src"))

from distbench.compose.schema import ModelConfig  # noqa: E402
from distbench.ranks.models import build_model  # noqa: E402
from distbench.workloads.inference.workload import greedy_decode, prompt_batch  # noqa: E402

RESULTS = PROJECT_DIR / "benchmarks" / "results" / "decode_vs_generate.json"


def model_config(name: str) -> ModelConfig:
    """conf/model/<name>.yaml as the typed config (its `defaults` list dropped)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(PROJECT_DIR / "conf" / "model" / f"{name}.yaml"))
    raw.pop("defaults", None)
    return ModelConfig(**raw)


def greedy_decode_before(model: Any, prompts: Any, num_new_tokens: int, device: str) -> dict:
    """The workload's decode loop before it dropped the attention mask (7d7ce0f and earlier): an
    all-ones mask grown by one column per token, the cache passed as `past_key_values`. Kept
    here for the before/after rows."""
    import torch

    prompts = prompts.to(device)
    mask = torch.ones_like(prompts)
    with torch.inference_mode():
        out = model(input_ids=prompts, attention_mask=mask, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1, :].float().argmax(dim=-1)
        tokens, cache = [token], out.past_key_values
        for _ in range(num_new_tokens - 1):
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            out = model(
                input_ids=token[:, None], attention_mask=mask, past_key_values=cache, use_cache=True
            )
            cache = out.past_key_values
            token = out.logits[:, -1, :].argmax(dim=-1)
            tokens.append(token)
    return {"tokens": torch.stack(tokens, dim=1).cpu()}


class DecodeClock:
    """A forward pre-hook on the model that notes the wall and process CPU clocks as the second
    forward (the first decode step) starts: both decoders are timed by the same rule, from
    there to their return (device-synced), whatever their own timers do."""

    def __init__(self, model: Any) -> None:
        self.calls, self.wall_s, self.cpu_s = 0, 0.0, 0.0
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module: Any, args: Any) -> None:
        self.calls += 1
        if self.calls == 2:
            self.wall_s, self.cpu_s = time.perf_counter(), time.process_time()

    def timed(self, decode: Any, num_new_tokens: int) -> dict[str, Any]:
        """Run decode() (a dict with the new `tokens`, and greedy_decode's own `decode_s`):
        the tokens, its decode wall and CPU seconds by this clock, and its own figure."""
        self.calls = 0
        out = decode()
        wall_s, cpu_s = time.perf_counter() - self.wall_s, time.process_time() - self.cpu_s
        assert self.calls == num_new_tokens, (self.calls, num_new_tokens)  # 1 prefill + N − 1
        return {
            "tokens": out["tokens"],
            "decode_s": wall_s,
            "decode_cpu_s": cpu_s,
            "own_decode_s": out.get("decode_s"),
        }


def generate_tokens(model: Any, prompts: Any, num_new_tokens: int, device: str) -> Any:
    """transformers' generate, greedy, exactly num_new_tokens new tokens per row."""
    import torch

    from distbench.ranks.dist import synchronize

    prompts = prompts.to(device)
    with torch.inference_mode():
        out = model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=False,
            max_new_tokens=num_new_tokens,
            min_new_tokens=num_new_tokens,
            pad_token_id=model.config.eos_token_id,
        )
        synchronize(device)
    return out[:, prompts.shape[1] :].cpu()


def compare(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One model: the decoders alternately, args.repeats times each after a warm-up."""
    cfg = model_config(name)
    model = build_model(cfg, args.dtype, 0, args.device).eval()
    prompts = prompt_batch(0, 0, args.batch_size, args.prompt_len, cfg.vocab_size)
    n, device = args.new_tokens, args.device
    sides = {
        "distbench": lambda: greedy_decode(model, prompts, n, device),
        "generate": lambda: {"tokens": generate_tokens(model, prompts, n, device)},
    }
    if args.before:
        sides["distbench before"] = lambda: greedy_decode_before(model, prompts, n, device)
    clock = DecodeClock(model)
    for decode in sides.values():
        decode()  # warm-up: allocator, kernels, lazy imports
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for rep in range(args.repeats):
        names = list(sides)
        order = names[rep % len(names) :] + names[: rep % len(names)]  # each side first in turn
        for side in order:
            runs[side].append(clock.timed(sides[side], n))
    clock.handle.remove()
    steps = args.batch_size * (n - 1)
    tokens = {side: runs[side][-1]["tokens"] for side in sides}
    row: dict[str, Any] = {
        "model": name,
        "same_tokens": all(t.equal(tokens["generate"]) for t in tokens.values()),
        "sides": list(sides),
    }
    for side in sides:
        wall_s = statistics.median(r["decode_s"] for r in runs[side])
        cpu_s = statistics.median(r["decode_cpu_s"] for r in runs[side])
        row[side] = {
            "decode_s": [r["decode_s"] for r in runs[side]],
            "decode_cpu_s": [r["decode_cpu_s"] for r in runs[side]],
            "own_decode_s": [r["own_decode_s"] for r in runs[side]],
            "decode_tokens_per_s": steps / wall_s,
            "ms_per_token": 1000 * wall_s / (n - 1),
            "cpu_ms_per_token": 1000 * cpu_s / (n - 1),
        }
    row["ratio"] = row["distbench"]["decode_tokens_per_s"] / row["generate"]["decode_tokens_per_s"]
    return row


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"eager greedy decode: batch {args.batch_size}, prompt {args.prompt_len}, "
        f"{args.new_tokens} new tokens, {args.dtype} on {args.device}, medians of {args.repeats}"
    )
    headers = ("model", "decoder", "tok/s", "ms/tok", "CPU ms/tok", "×gen", "CPU ×gen")
    for header in headers:
        table.add_column(header, justify="left" if header in ("model", "decoder") else "right")
    for row in rows:
        base = row["generate"]
        for side in row["sides"]:
            fig = row[side]
            table.add_row(
                row["model"],
                side,
                f"{fig['decode_tokens_per_s']:,.1f}",
                f"{fig['ms_per_token']:.2f}",
                f"{fig['cpu_ms_per_token']:.2f}",
                f"{fig['decode_tokens_per_s'] / base['decode_tokens_per_s']:.2f}",
                f"{base['cpu_ms_per_token'] / fig['cpu_ms_per_token']:.2f}",
            )
        table.add_section()
    Console().print(table)
    print("×gen: decode tokens/s over generate's (wall clock); CPU ×gen: generate's CPU seconds")
    print("per token over the decoder's (this process's CPU time; >1: the decoder is faster)")
    for row in rows:
        same = "the same tokens" if row["same_tokens"] else "DIFFERENT tokens"
        print(f"{row['model']}: the decoders produced {same}")


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine type."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def machine() -> dict[str, Any]:
    import torch
    import transformers

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "host": platform.node(),
        "cpu": cpu_name(),
        "num_cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "num_threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default="tiny,gpt2_124m", help="conf/model names, comma-separated"
    )
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: its own)")
    parser.add_argument(
        "--before", action="store_true", help="also the loop before the mask was dropped"
    )
    parser.add_argument("--quick", action="store_true", help="tiny only, 2 repeats, 8 tokens")
    args = parser.parse_args()
    if args.quick:
        args.models, args.repeats, args.new_tokens, args.prompt_len = "tiny", 2, 8, 32
    if args.new_tokens < 2:
        parser.error(f"--new-tokens={args.new_tokens}: need at least 2 (one decode step)")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows = [compare(name, args) for name in args.models.split(",")]
    print_table(rows, args)
    doc = {"machine": machine(), "args": vars(args), "command": " ".join(sys.argv), "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
