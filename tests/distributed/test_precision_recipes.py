"""bf16 means one recipe on both engines (bf16 compute, fp32 master weights and AdamW states,
fp32 gradient reduction): torch ddp (autocast), torch fsdp (FSDP2's mixed-precision policy) and
DeepSpeed ZeRO-3 (its bf16 block, the one dp uses too, with the parameters partitioned) train
the same model from the same weights and agree with the single-device reference run under the
same autocast.

    python -m pytest tests/distributed/test_precision_recipes.py -q
"""

from __future__ import annotations

import json

import pytest

from distbench.orchestrator import run_job
from tests.conftest import CONF_DIR, PROJECT_DIR, compose_config

pytestmark = pytest.mark.distributed

# One step of one micro-batch of 64-token rows (bf16 runs slowly on CPUs): what is compared is
# the recipe and the first-step loss, computed before any update.
FAST = ["tracking=none", "workload.num_warmup_steps=0", "workload.num_steps=1", "world_size=2"]
FAST += ["batch.seq_len=64", "batch.grad_accum_steps=1"]
BF16 = ["workload.dtype=bf16"]


def run(tmp_path, *overrides):
    outcome = run_job(compose_config([*FAST, *overrides]), tmp_path, CONF_DIR, PROJECT_DIR)
    result = json.loads((tmp_path / "result.json").read_text())
    return outcome, result


def test_bf16_mixed_is_one_recipe_on_ddp_fsdp_and_zero3(tmp_path):
    first_losses = {}
    for strategy in ("ddp", "fsdp", "zero3"):
        outcome, result = run(tmp_path / strategy, f"strategy={strategy}", *BF16)
        assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
        assert outcome["precision"] == "bf16-mixed" and outcome["optimizer_impl"] == "fused"
        # equivalent to the single-device reference computed under the same bf16 autocast
        assert outcome["equivalent"] == "true", outcome["metrics"].get("loss_rel_err_vs_single")
        first_losses[strategy] = result["losses"][0]
    reference = first_losses["ddp"]
    assert all(abs(loss - reference) / reference < 2e-2 for loss in first_losses.values())


def test_pure_bf16_runs_on_torch_and_is_tagged(tmp_path):
    outcome, _ = run(tmp_path, "strategy=ddp", *BF16, "workload.precision=pure")
    assert outcome["status"] == "FINISHED", outcome.get("failure_reason")
    assert outcome["precision"] == "bf16-pure" and outcome["equivalent"] == "true"
