"""workload=inference: per request batch (a step), every data-parallel replica prefills
batch_size prompts of prompt_len tokens and decodes num_new_tokens greedily (KV cache). Its
schema, checks and option; the rank code is workload.py, the formulas metrics.py.

strategy=dp (or ddp, zero1, zero2): whole-model replicas, each its own prompts; strategy=tp:
DeepSpeed AutoTP (init_inference) over strategy.tp ranks.

    python run.py -m workload=inference strategy=dp,tp world_size=2 inference.num_new_tokens=32
    python run.py workload=inference strategy=dp hardware=auto   # on a GPU: CUDA graphs by default
"""

from __future__ import annotations

from dataclasses import dataclass

from distbench.compose import checks
from distbench.compose.checks import one_of, positive
from distbench.compose.schema import BatchConfig, ConfigError, WorkloadConfig
from distbench.job import Job
from distbench.workloads import MetricSpec, WorkloadSpec, common_metrics, register

DECODINGS = ("greedy",)
TTFT = MetricSpec(
    "time_to_first_token_s", "s", "min", "time to first token (s)", ".3f", column="TTFT (s)"
)
DECODE_RATE = MetricSpec(
    "decode_tokens_per_s",
    "tokens/s",
    "max",
    "decode (tokens/s)",
    ",.0f",
    column="decode tok/s",
)
TPOT = MetricSpec("time_per_output_token_s", "s", "min", "time per output token (s)", ".4f")
LATENCY_P50 = MetricSpec("latency_s_p50", "s", "min", "request latency p50 (s)", ".3f")
LATENCY_P90 = MetricSpec("latency_s_p90", "s", "min", "request latency p90 (s)", ".3f")
# Memory-bandwidth utilisation of the decode steps (metrics.py), MFU's twin for a step bound by
# the bytes it reads; logged where the hardware catalog gives the device's bandwidth.
MBU = MetricSpec("mbu_pct", "%", "max", "MBU (%)", ".2f", column="MBU %")
# Why kernel_inject is refused: DeepSpeed's injected GPT-2 layer reads the KV cache as a tensor
# ("'DynamicCache' object has no attribute 'dtype'") and its Llama container fuses q, k, v and
# refuses grouped-query attention ("Merging tensors is not allowed here"), while transformers
# >= 4.56 (what distbench supports) passes Cache objects (the GPU run that found it:
# benchmarks/gpu_runs/2026-11-25_h100/README.md).
KERNEL_INJECT_REFUSAL = (
    "inference.kernel_inject=true: DeepSpeed's injected inference kernels do not run with the "
    "transformers versions distbench supports (they expect the legacy tuple KV cache; Llama's "
    "also refuses grouped-query attention); use inference.cuda_graph=true"
)


@dataclass
class InferenceWorkload(WorkloadConfig):
    """Request batches: warm-up batches (not timed), then timed ones."""

    name: str = "inference"
    num_warmup_steps: int = 1
    num_steps: int = 5
    dtype: str = "fp32"


@dataclass
class InferenceConfig:
    """The `inference` node."""

    num_new_tokens: int = 16  # >= 2: the first comes from prefill, the rest are decode steps
    prompt_len: int | None = None  # None: batch.seq_len
    batch_size: int | None = None  # prompts per replica; None: batch.micro_batch_size
    decoding: str = "greedy"  # argmax, no sampling (deterministic across layouts)
    # CUDA only: a static KV cache and the decode step compiled with
    # torch.compile(mode="reduce-overhead"), replayed as a CUDA graph per token; tagged decode.
    # None (the default): on wherever it runs (cuda_graph_runs: a CUDA device, whole replicas,
    # a warm-up batch to compile in), off elsewhere; eager decode was 8.5x slower per token for
    # llama_1b on an H100 (benchmarks/gpu_runs/2026-11-25_h100). The Job holds the bool.
    cuda_graph: bool | None = None
    # DeepSpeed's injected kernels (init_inference(replace_with_kernel_inject=True)): refused,
    # with the reason (KERNEL_INJECT_REFUSAL).
    kernel_inject: bool = False


def inference_sizes(inference: InferenceConfig, batch: BatchConfig) -> tuple[int, int]:
    """(prompt_len, batch_size per replica): inference.prompt_len and inference.batch_size, or
    batch.seq_len and batch.micro_batch_size where those are null."""
    prompt_len, batch_size = inference.prompt_len, inference.batch_size
    return (
        int(batch.seq_len if prompt_len is None else prompt_len),
        int(batch.micro_batch_size if batch_size is None else batch_size),
    )


def check(job: Job) -> None:
    """Whole-weight data-parallel replicas (dp, ddp, zero1/2: their training state does not
    exist at inference) or DeepSpeed AutoTP (strategy.tp > 1); no pipeline, nothing that shards
    or moves the weights across replicas."""
    model, strategy, inf, layout = job.model, job.strategy, job.options, job.layout
    one_of("inference.decoding", inf.decoding, DECODINGS)
    name, tp = strategy.name, layout.tp
    if job.activation_checkpointing != "none":
        raise ConfigError(
            f"activation_checkpointing={job.activation_checkpointing}: workload=inference runs no "
            "backward pass, so nothing is recomputed; use activation_checkpointing=none"
        )
    if layout.pp > 1:
        raise ConfigError(
            f"workload=inference runs data-parallel replicas or tensor parallelism, not "
            f"pp({layout.pp}); use strategy=dp or strategy=tp"
        )
    if tp > 1 and strategy.engine != "deepspeed":
        raise ConfigError(
            f"workload=inference splits tp({tp}) with DeepSpeed AutoTP (init_inference), "
            f"strategy={name} is engine={strategy.engine}; use strategy=tp"
        )
    sharded = layout.zero_stage == 3 or strategy.offload_param != "none"
    if sharded or strategy.data_parallel == "fsdp":
        how = (
            f"zero_stage={layout.zero_stage}, offload_param={strategy.offload_param}"
            if sharded
            else "data_parallel=fsdp"
        )
        raise ConfigError(
            f"workload=inference keeps whole weights on every replica; strategy={name} "
            f"({how}) shards or offloads them; use strategy=dp or strategy=tp"
        )
    checks.model_shape(model, tp)
    prompt_len, batch_size = inference_sizes(inf, job.batch)
    positive("inference.prompt_len (or batch.seq_len)", prompt_len)
    positive("inference.batch_size (or batch.micro_batch_size)", batch_size)
    if inf.num_new_tokens < 2:
        raise ConfigError(
            f"inference.num_new_tokens={inf.num_new_tokens} must be >= 2: the first token "
            "comes from prefill, decode needs at least one more"
        )
    if prompt_len + inf.num_new_tokens > model.max_position_embeddings:
        raise ConfigError(
            f"prompt_len({prompt_len}) + inference.num_new_tokens({inf.num_new_tokens}) > "
            f"model.max_position_embeddings({model.max_position_embeddings})"
        )
    checks.no_fp16_on_cpu(job.device, job.dtype)
    if inf.kernel_inject:
        raise ConfigError(KERNEL_INJECT_REFUSAL)
    if inf.cuda_graph is None:  # settled here, before the Job's tree is hashed or written
        inf.cuda_graph = cuda_graph_runs(job)
    if inf.cuda_graph:
        check_cuda_graph(job)


def cuda_graph_runs(job: Job) -> bool:
    """Where inference.cuda_graph's default turns it on: what check_cuda_graph accepts."""
    return job.device == "cuda" and job.layout.tp == 1 and job.workload.num_warmup_steps >= 1


def check_cuda_graph(job: Job) -> None:
    """CUDA graphs: a CUDA device, whole replicas (AutoTP's all-reduces inside a captured graph
    have not run on a GPU here), and a warm-up request batch to compile in."""
    if job.device != "cuda":
        raise ConfigError(
            f"inference.cuda_graph=true needs a CUDA device (hardware device is {job.device}); "
            "leave it false on CPU"
        )
    if job.layout.tp > 1:
        raise ConfigError(
            f"inference.cuda_graph=true runs on whole replicas, not with tp({job.layout.tp}); "
            "use strategy=dp"
        )
    if job.workload.num_warmup_steps < 1:
        raise ConfigError(
            "inference.cuda_graph=true compiles during the first request batch: "
            f"workload.num_warmup_steps={job.workload.num_warmup_steps} must be >= 1"
        )


_AFTER_MFU = common_metrics.MODEL_RUN_METRICS.index(common_metrics.MFU) + 1  # MBU beside MFU
SPEC = register(
    WorkloadSpec(
        name="inference",
        module=__name__,
        schema=InferenceWorkload,
        check=check,
        options_key="inference",
        options_schema=InferenceConfig,
        metrics=(
            TTFT,
            DECODE_RATE,
            *common_metrics.MODEL_RUN_METRICS[:_AFTER_MFU],  # throughput, TFLOP/s, MFU
            MBU,
            *common_metrics.MODEL_RUN_METRICS[_AFTER_MFU:],  # memory, cost
            TPOT,
            LATENCY_P50,
            LATENCY_P90,
        ),
        tag_keys=("decode",),  # measure()'s: eager or cuda_graph
    )
)
