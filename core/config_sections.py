"""The configuration's sections: one frozen dataclass per TOML table, every key declared once.

A key's type is its annotation; its allowed values (``choices``, ``min``,
``max``, ``byte_size``) are field metadata that :mod:`tercet.config` checks
when it resolves a value from a file, the environment or the command line.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from tercet.native.levels import LEVEL_NAMES


def _choice(default, *choices):
    return field(default=default, metadata={"choices": choices})


def _at_least(default, minimum):
    return field(default=default, metadata={"min": minimum})


# What server.allowed_origins and server.allowed_hosts hold, item by item.
ORIGIN_PATTERN = r"\*|https?://[^/\s?#@]+"
ORIGIN_MEANING = 'an origin such as "https://app.example.com" (scheme, host and port only) or "*"'
HOST_PATTERN = r"\*|[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]"
HOST_MEANING = 'a host name such as "api.example.com" (no port) or "*"'
# What server.weights_dirs holds, item by item.
DIRECTORY_PATTERN = r"/.*"
DIRECTORY_MEANING = 'an absolute directory path such as "/srv/checkpoints"'

# The weight and KV dtypes a model runs in (torch's names); "auto" picks one by device.
DTYPE_NAMES = ("float32", "bfloat16")
# What [cache] kv_dtype stores K/V as: the activations' dtype ("auto"), another float dtype, or a
# quantized one with a scale per token and KV head (tercet.model.kv_dtypes).
KV_DTYPE_NAMES = ("auto", *DTYPE_NAMES, "int8", "fp8_e4m3")


@dataclass(frozen=True)
class ModelConfig:
    # A Hugging Face checkpoint directory or a .gguf file; None: the built-in default model.
    path: str | None = None
    # Activations' (and the KV cache's) dtype. auto: bfloat16 on CUDA or when
    # any weight is quantized (the quantized kernels run in bfloat16), else float32.
    dtype: str = _choice("auto", "auto", *DTYPE_NAMES)
    served_model_name: str | None = None  # None: the model's name (its directory, or its GGUF file's stem)
    device: str = _choice("auto", "auto", "cpu", "cuda")
    # The linear method of every linear layer (a registered name: dense, int8,
    # q4_0, q4_1, q8_0, …), or "auto" (each tensor in the format it was shipped
    # in) or "none" (dense, dequantizing a GGUF).
    quantization: str = "auto"
    # Bytes for the KV pool (an integer or a size such as "512MiB"); the pool
    # holds as many tokens as fit. cache.max_total_tokens, when set, wins.
    kv_cache_memory: str = field(default="192MiB", metadata={"byte_size": True})
    # On CPU: GGUF block layers (q4_0, q4_1, q8_0) run on tercet's block kernel
    # (plugins/linear_layers/block_matmul.c, at every level but the portable one) at
    # every batch size, with no dense copy, and a layer's norms, SiLU and rotary
    # on its fused ops (core/model/cpu_fused_ops.c). false: torch's kernels and ops.
    native_kernels: bool = True
    # The instruction-set level tercet's C kernels are built and run at (tercet.native.levels):
    # auto: the best this CPU runs; a lower one forces it (tests, comparisons: avx2 on an
    # AVX-512 machine); one the CPU lacks fails the start naming what it lacks.
    cpu_isa: str = _choice("auto", "auto", *LEVEL_NAMES)
    # Where torch's weight-only kernels run a quantized layer on CPU (not the
    # block kernel): fed this many rows (tokens in one step) or more, it runs on
    # a bfloat16 copy of its weights kept beside its codes, as torch's kernels
    # lose to dense bfloat16 from 8 rows on. 0: no copy (2 bytes a weight less).
    dense_from_rows: int = _at_least(8, 0)
    # Same request and seed, same tokens, whatever the batch, the chunking and the
    # prefix cache (tercet.model.determinism): every step's attention on the paged_cpu
    # kernel, every linear layer on a batch-invariant kernel, else start-up fails.
    deterministic: bool = False
    # How /v1/embeddings turns the final hidden states into one vector (see
    # tercet.formats.pooling_spec). auto: as the folder's sentence-transformers modules.json
    # says, and without one none (a decoder then only generates); mean, last,
    # cls: that pooling, L2-normalised, whatever the folder says.
    pooling: str = _choice("auto", "auto", "none", "mean", "last", "cls")
    # torch's CPU threads in each scheduler process. 0: as many as the cores that other
    # processes leave free, looked at about once a second (tercet.model.cpu_threads).
    cpu_threads: int = _at_least(0, 0)
    # On CUDA: decode batches of up to this many sequences replay CUDA graphs captured at
    # start-up, one per batch-size bucket (1, 2, 4, 8, 16, 24…; tercet.model.decode_graphs),
    # capped by scheduler.max_running_requests; larger batches and prompt steps run eagerly.
    # Needs an attention backend that supports graphs (triton). 0: every step eager.
    cuda_graph_max_batch: int = _at_least(0, 0)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = field(default=30000, metadata={"min": 0, "max": 65535})
    # Unset: no authentication. Set: never blank or a placeholder (see check_api_key).
    api_key: str | None = field(default=None, metadata={"refuses_placeholders": True, "secret": True})
    # Browser pages of other sites may call the server only from these origins
    # ("https://app.example.com"; "*": any). A request whose Origin header names
    # another origin is refused with 403 (tercet.http.server.browser_guard).
    allowed_origins: tuple[str, ...] = field(default=(), metadata={"items": (ORIGIN_PATTERN, ORIGIN_MEANING)})
    # Host names a request may be addressed to besides the server's own (the bound
    # host; localhost when bound to loopback or all interfaces; any IP address).
    # "*": any name, which turns the DNS-rebinding check off.
    allowed_hosts: tuple[str, ...] = field(default=(), metadata={"items": (HOST_PATTERN, HOST_MEANING)})
    log_level: str = _choice("info", "debug", "info", "warning", "error")
    startup_timeout: float = _at_least(900.0, 1.0)
    # Seconds GET /health_generate waits for its one-token generation before answering 503.
    health_generate_timeout: float = _at_least(20.0, 0.1)
    # A child process that dies later: stop the server ("exit"), or keep it up
    # answering 503 on health checks and generation ("unhealthy").
    on_child_failure: str = _choice("exit", "exit", "unhealthy")
    # A scheduler step (or any busy stretch without progress) longer than this
    # many seconds counts as the scheduler failing: it is killed, and
    # on_child_failure applies.
    watchdog_timeout: float = _at_least(300.0, 0.1)
    # On SIGTERM/SIGINT new requests get 503 and requests in flight get up to
    # this many seconds to finish before they are ended and the children stopped.
    shutdown_timeout: float = _at_least(30.0, 0.0)
    # Request bodies larger than this are refused with 413 before they are parsed.
    max_request_body_bytes: int = _at_least(16 * 1024 * 1024, 1024)
    # Most completions one list-prompt request may ask for, prompts × n: a longer
    # batch is a 400 (the body size alone would let through tens of thousands).
    max_prompts_per_request: int = _at_least(256, 1)
    # Seconds between "where the time goes" log lines of each process (receive,
    # schedule, forward, sampling, output, detokenize…); 0 turns profiling off.
    profile_interval: float = _at_least(0.0, 0.0)
    # API worker processes serving HTTP on host:port together (SO_REUSEPORT), each with its
    # own TokenizerManager, tokenizer and chat templating; 1: the main process serves it.
    api_workers: int = field(default=1, metadata={"min": 1, "max": 64})
    # POST /update_weights_from_disk loads only checkpoints under these directories (symbolic links
    # resolved); none: any path the server can read, as the operator who may call it names.
    weights_dirs: tuple[str, ...] = field(default=(), metadata={"items": (DIRECTORY_PATTERN, DIRECTORY_MEANING)})
    # POST /start_profile writes its torch traces only under this directory ("": $XDG_STATE_HOME/tercet/profiles,
    # ~/.local/state/tercet/profiles without it); see profile_root.
    profile_dir: str = ""

    @property
    def profile_root(self) -> str:
        """The absolute directory profiles go under (``profile_dir`` made absolute, or its default)."""
        if self.profile_dir:
            return os.path.abspath(os.path.expanduser(self.profile_dir))
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return os.path.join(os.path.abspath(state), "tercet", "profiles")


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "fcfs"
    max_running_requests: int = _at_least(32, 1)
    max_queued_requests: int = _at_least(4096, 1)
    # Most prompt tokens one step may prefill, across all prefilling requests;
    # a longer prompt is split into chunks over several steps.
    chunked_prefill_size: int = _at_least(4096, 1)
    # While requests decode, a step takes as many prompt tokens as keep it within this many times a
    # decode-only step (by the step costs measured as it runs), so long prompts arriving hold the
    # streams' inter-token latency to this bound; 0: always up to chunked_prefill_size.
    max_decode_slowdown: float = field(default=2.0, metadata={"min": 0.0})
    # Data-parallel ranks: scheduler processes, each with its own model replica and KV pool.
    dp_size: int = field(default=1, metadata={"min": 1, "max": 16})
    # How the TokenizerManager picks a rank for each new request: a load balancer plugin's name
    # (round_robin, shortest_queue, cache_aware, or an installed plugin's).
    load_balance: str = "round_robin"


@dataclass(frozen=True)
class CacheConfig:
    # Tokens in the KV pool; None: as many as model.kv_cache_memory holds.
    max_total_tokens: int | None = _at_least(None, 16)
    page_size: int = _at_least(16, 1)
    # Share the KV of common prompt prefixes between requests (a radix tree of pages).
    prefix_cache: bool = True
    # A tier below the pool for the prefix cache's evicted pages (a "KV storage" plugin):
    # "none", "host" (memory of this process) or "file" (a directory, kept across restarts).
    storage: str = "none"
    # The host tier's budget, and the file tier's directory ("": <tercet cache dir>/kv_pages) and budget.
    host_bytes: str = field(default="1GiB", metadata={"byte_size": True})
    file_dir: str = ""
    file_bytes: str = field(default="8GiB", metadata={"byte_size": True})
    # What the pool stores K/V as: "auto" (the activations' dtype), "bfloat16", "float32", or
    # quantized, "int8" or "fp8_e4m3" (about twice the tokens in model.kv_cache_memory; CPU, paged_cpu only).
    kv_dtype: str = _choice("auto", *KV_DTYPE_NAMES)


@dataclass(frozen=True)
class IpcConfig:
    transport: str = "ipc"
    serializer: str = "msgpack"
    # Interface tcp endpoints bind to; loopback unless ranks live on other hosts.
    tcp_host: str = "127.0.0.1"
    # The longest frame a receiver decodes (an integer or a size such as "64MiB");
    # a longer one is dropped and counted, and a sender refuses to encode one.
    max_message_bytes: str = field(default="256MiB", metadata={"byte_size": True})


@dataclass(frozen=True)
class AttentionConfig:
    # "auto": the built-in suited to the device (paged_cpu on a CPU, torch_native elsewhere).
    backend: str = "auto"


@dataclass(frozen=True)
class DetokenizerConfig:
    strategy: str = "incremental"


@dataclass(frozen=True)
class GrammarConfig:
    # The grammar backend that compiles json_schema / regex / ebnf constraints.
    backend: str = "llguidance"
    # Compiled grammars kept, by constraint, for requests that send the same one.
    cache_size: int = _at_least(128, 1)
    # Seconds a constrained request waits for its grammar before it fails with a 400.
    compile_timeout: float = _at_least(10.0, 0.01)
    # Threads compiling at once in each scheduler process; 0: one per core it may run on.
    compile_workers: int = _at_least(0, 0)
    # Bytes of a constraint's text (a JSON Schema, regex or grammar) the API takes; larger is a 400.
    max_constraint_bytes: int = _at_least(128 * 1024, 1)
    # A JSON Schema object that lists its properties and does not say additionalProperties
    # allows no other keys (what OpenAI's strict schemas mean); true: JSON Schema's default, any.
    allow_extra_properties: bool = False


@dataclass(frozen=True)
class ParallelConfig:
    # Tensor-parallel worker processes per data-parallel rank, one torch.distributed
    # group each (gloo on CPU, NCCL on CUDA); every one holds a shard of the model.
    tp_size: int = field(default=1, metadata={"min": 1, "max": 64})
    # Hosts the workers (dp_size x tp_size of them) are spread over, in equal shares:
    # node 0 runs the API, the tokenizer and the detokenizer too.
    nnodes: int = field(default=1, metadata={"min": 1, "max": 64})
    # This host's place among them; every node is started with the same config but this.
    node_rank: int = field(default=0, metadata={"min": 0, "max": 63})
    # host:port of node 0, where the nodes meet (a torch.distributed TCPStore); needed with nnodes > 1.
    dist_init_addr: str | None = None
    # Seconds a node waits for the others at start-up (node 0 for the rest to join,
    # the others to reach dist_init_addr) before failing.
    dist_init_timeout: float = _at_least(120.0, 1.0)
    # What every node proves it holds before node 0 takes it, and node 0 proves back
    # (tercet.nodes.handshake); needed with nnodes > 1, here or in node_secret_file.
    node_secret: str | None = field(default=None, metadata={"secret": True})
    # A file whose first line is node_secret: keeps it off command lines and out of config files.
    node_secret_file: str | None = None


@dataclass(frozen=True)
class TokenizerConfig:
    # How special-token text in a conversation's messages and tools is tokenized: "split", as
    # plain characters (a user cannot close its turn or open the assistant's); "parse", as the
    # control tokens, where a client may write them. The chat template's own markers are always
    # control tokens, and raw prompts (/v1/completions, /generate) are never split.
    special_tokens_in_content: str = _choice("split", "split", "parse")


@dataclass(frozen=True)
class ToolsConfig:
    # The tool-call parser: how tool calls are written in the model's output.
    parser: str = "hermes"


@dataclass(frozen=True)
class ReasoningConfig:
    # The reasoning parser: how a model marks its reasoning ("none": nothing is separated).
    parser: str = "none"
    # The chat template opens the reasoning in the prompt: the output starts inside it.
    starts_in_reasoning: bool = False


@dataclass(frozen=True)
class SpeculativeConfig:
    # The draft proposer (a registered name: ngram, …) whose drafts each step
    # verifies in one forward; "none": no speculative decoding.
    proposer: str = "none"
    # Most draft tokens a request is given per step (the forward then feeds it k + 1).
    k: int = field(default=4, metadata={"min": 1, "max": 16})
    # Speculation runs in a step only while at most this many requests decode in it:
    # past that, verifying drafts costs more than the tokens it saves (see docs/speculative.md).
    max_batch: int = _at_least(4, 0)
    # The ngram proposer's shortest and longest suffix looked up in the request's own tokens.
    ngram_min: int = field(default=2, metadata={"min": 1, "max": 64})
    ngram_max: int = field(default=4, metadata={"min": 1, "max": 64})
    # The draft_model proposer's model: a checkpoint directory or .gguf file of the served
    # model's tokenizer, smaller than it; and its linear method (as model.quantization).
    draft_model: str | None = None
    draft_quantization: str = "auto"
    # The linear method the self_quantized proposer drafts with: the served checkpoint's own
    # weights in it (a GGUF's blocks of that format as they are, dense weights quantized at load).
    self_quantization: str = "q4_1"
    # Tokens in the KV pool of a proposer's draft model (draft_model, self_quantized): it holds
    # the requests drafted for, beside the served model's pool, not in it.
    draft_max_total_tokens: int = _at_least(4096, 16)


# What lora.adapters holds, item by item ("NAME=PATH"; a TOML table { NAME = "PATH" } is read as these).
ADAPTER_PATTERN = r"[A-Za-z0-9._:-]+=.+"
ADAPTER_MEANING = 'an adapter as NAME=PATH (a name of letters, digits and ._:-, then its directory)'


@dataclass(frozen=True)
class LoraConfig:
    # PEFT adapters loaded at start-up, each served under its name (requests pick one by name).
    adapters: tuple[str, ...] = field(default=(), metadata={"items": (ADAPTER_PATTERN, ADAPTER_MEANING),
                                                            "table": True})
    # Serve adapters even with none at start-up (they come by POST /load_lora_adapter).
    enabled: bool = False
    # Adapters whose weights are held at once; past it the least recently used one not in use is dropped.
    max_loaded: int = field(default=8, metadata={"min": 1, "max": 1024})
    # The largest rank an adapter may have: it bounds what one adapter costs.
    max_rank: int = field(default=64, metadata={"min": 1, "max": 1024})
    # The LoRA backend (a registered name: torch, ...) that adds each segment's delta.
    backend: str = "torch"

    @property
    def is_on(self) -> bool:
        return self.enabled or bool(self.adapters)

    @property
    def adapter_paths(self) -> dict[str, str]:
        """The start-up adapters by name (the config check refuses a name given twice)."""
        return dict(item.split("=", 1) for item in self.adapters)


@dataclass(frozen=True)
class ObservabilityConfig:
    # An OTLP/HTTP traces endpoint (such as "http://collector:4318/v1/traces"): every request is
    # exported as a span with its phases (tercet.frontend.request_traces). Needs the otel extra
    # (pip install 'tercet[otel]'). "": no traces.
    otlp_endpoint: str = ""
    # The service.name resource attribute of the spans.
    service_name: str = "tercet"


@dataclass(frozen=True)
class TercetConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    ipc: IpcConfig = field(default_factory=IpcConfig)
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    detokenizer: DetokenizerConfig = field(default_factory=DetokenizerConfig)
    grammar: GrammarConfig = field(default_factory=GrammarConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    reasoning: ReasoningConfig = field(default_factory=ReasoningConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    # [plugins.<name>] tables, passed to plugins as they are.
    plugins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # [plugins] disable: entry-point plugins that are not loaded at all, in any process.
    disabled_plugins: tuple[str, ...] = ()

    def replace(self, section: str, **changes) -> "TercetConfig":
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **changes)})
