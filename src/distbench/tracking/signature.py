"""A run's signature: a hash of what it measures, so a repeat is recognised, not rerun
(the idea of facebookresearch/dora). Keys that do not change the measurement are left out.

    python -c "import distbench.tracking.signature as s; print(s.run_signature({'a': 1}))"
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from distbench.probes.parts import ENGINE_PARTS_FIELDS, STEP_PARTS_FIELDS

# The tag that carries it (public: compare pairs runs by it, resume finds them by it).
SIGNATURE_TAG = "distbench.signature"
# Set on an earlier run that a resumed sweep (resume=true) skipped, one tag per sweep parent
# (the key ends with the parent run id): the report of that sweep shows it, so a resumed
# sweep's report is the whole grid.
RESUMED_INTO_TAG_PREFIX = "distbench.resumed_into."
# Where results go, how long to wait, whether to resume, which metric a sweeper searches on
# (`objective`), how many times a config runs (`repeats`): none of it changes what is measured.
# `measured` (Job.measured) is left out as a node, less MEASURED_PEAK_KEYS.
EXCLUDED_KEYS = (
    "tracking",
    "limits",
    "resume",
    "retry_failed",
    "hydra",
    "objective",
    "measured",
    "repeats",
)


# Hardware figures that only feed the predictions (the memory bandwidth, the time and link
# sources; and in a tree recorded before Job.measured, the measured links and step parts):
# a run measures the same thing whatever they hold, so a run with measured links pairs with
# one without (compare, resume).
EXCLUDED_HARDWARE_KEYS = (
    "link_source",
    "measured_interconnect_gbps",
    "measured_internode_gbytes_per_s",
    "link_latency_us",
    "link_calibration_error",
    "mem_bandwidth_gbps",
    "time_source",
    "train_efficiency",
    *STEP_PARTS_FIELDS,
    *ENGINE_PARTS_FIELDS,
    "time_calibration_error",
)

# The measured peak's notes, hashed as part of `hardware` as they were when HardwareConfig held
# them (a measured peak replaces hardware's peak_tflops_<dtype>, which is hashed too): a run's
# signature stays what it was.
MEASURED_PEAK_KEYS = (
    "catalog_peak_tflops_fp32",
    "catalog_peak_tflops_bf16",
    "catalog_peak_tflops_fp16",
    "peak_calibration_error",
)


# Each engine's strategy schema holds only its own fields; before the schemas were split, every
# strategy node held all of them. Hashing the node with the other engines' unused values filled
# in keeps a run's signature what it was, so resume and compare still pair runs recorded before.
SHARED_SCHEMA_STRATEGY_FIELDS = {
    "zero_stage": None,
    "default_zero_stage": 0,
    "offload_optimizer": "none",
    "offload_param": "none",
    "data_parallel": None,
    "pp_schedule": None,
}


# Keys added after runs were recorded, hashed only when they hold something else than what
# every run before them ran: a run without activation checkpointing or compile keeps the
# signature it had. The period of selective checkpointing counts only under selective.
DEFAULT_ROOT_KEYS = {"activation_checkpointing": "none"}
DEFAULT_WORKLOAD_KEYS = {"compile": False}


# Torch TP switches added after runs were recorded (engines/torch_native.py): every torch run
# before them replicated the embedding and LM head and ran no sequence parallel, so each is
# hashed only where it is on under tp > 1, where it changes what runs.
TP_SWITCHES = ("vocab_parallel", "sequence_parallel")


def _tp_switches_off(strategy: dict[str, Any]) -> list[str]:
    """The TP_SWITCHES of a strategy node that change nothing: off, or tp = 1."""
    split = strategy.get("tp", 1) != 1
    return [k for k in TP_SWITCHES if k in strategy and not (split and strategy[k])]


def _without_defaults(tree: dict[str, Any]) -> dict[str, Any]:
    """The tree less DEFAULT_ROOT_KEYS and DEFAULT_WORKLOAD_KEYS that hold their default, and
    less the TP switches that change nothing (`_tp_switches_off`)."""
    kept = {
        k: v for k, v in tree.items() if k not in DEFAULT_ROOT_KEYS or v != DEFAULT_ROOT_KEYS[k]
    }
    if kept.get("activation_checkpointing") != "selective":
        kept.pop("activation_checkpointing_every", None)
    strategy = kept.get("strategy")
    if isinstance(strategy, dict):
        off = _tp_switches_off(strategy)
        kept["strategy"] = {k: v for k, v in strategy.items() if k not in off}
    workload = kept.get("workload")
    if isinstance(workload, dict):
        kept["workload"] = {
            k: v
            for k, v in workload.items()
            if k not in DEFAULT_WORKLOAD_KEYS or v != DEFAULT_WORKLOAD_KEYS[k]
        }
    return kept


def run_signature(config_tree: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of the config (minus EXCLUDED_KEYS, EXCLUDED_HARDWARE_KEYS
    and the newer keys at their default (DEFAULT_ROOT_KEYS, DEFAULT_WORKLOAD_KEYS), plus the
    measured node's MEASURED_PEAK_KEYS under `hardware`) as canonical JSON."""
    kept = {k: v for k, v in _without_defaults(config_tree).items() if k not in EXCLUDED_KEYS}
    if isinstance(kept.get("strategy"), dict):
        kept["strategy"] = {**SHARED_SCHEMA_STRATEGY_FIELDS, **kept["strategy"]}
    if isinstance(kept.get("hardware"), dict):
        hardware = kept["hardware"]
        measured = config_tree.get("measured")
        if isinstance(measured, dict):
            hardware = {**hardware, **{k: measured.get(k) for k in MEASURED_PEAK_KEYS}}
        kept["hardware"] = {k: v for k, v in hardware.items() if k not in EXCLUDED_HARDWARE_KEYS}
    canonical = json.dumps(kept, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
