"""What a plugin may use: tercet's public plugin API, versioned.

Import from here, not from the modules behind it: names here keep working
within a major version of :data:`API_VERSION`, names elsewhere may move. The
promise (see docs/plugins.md, "Compatibility"):

- a minor version (1.0 -> 1.1) only adds: new hooks, new names here, new
  optional arguments and fields with defaults;
- a major version (1.x -> 2.0) may remove or change any of them.

A plugin says which versions it works with by a module-level
``TERCET_API_VERSIONS`` string, a version specifier such as ``">=1.0,<2"``;
a plugin whose range leaves out the running version is refused at start-up
with an error naming both. A plugin that declares nothing is assumed to fit.

A plugin with a kernel in C ships the source and loads it with
:func:`load_native_library` (built once per machine and instruction-set level into
tercet's cache; :class:`NativeBuildError` says why it cannot be, so the plugin can fall
back). :func:`level_in_use` is the level it is built at (an :class:`IsaLevel`: its name,
compiler flags and CPU features), :func:`runnable_levels` those this CPU runs and
:func:`cpu_features` what the CPU has: a kernel asks these, never the CPU itself.

Nothing here imports torch or another heavy library: plugins are imported in
every process. The model-side building blocks a linear method, an attention
backend or an architecture needs at run time (quantized blocks, forward
batches, the KV cache, checkpoints, the Llama decoder) are in
:mod:`tercet.plugin_api.model`, which imports torch: import it inside the
functions that build layers or models, never at a plugin module's top.
"""

from __future__ import annotations

from tercet.containment import ContainedFailures
from tercet.errors import ConfigError, RequestError, TercetError
from tercet.byte_size import parse_byte_size
from tercet.formats.default_model import default_cache_dir
from tercet.frontend.io_struct import GenerateOutput, GenerateRequest
from tercet.frontend.load_balancer import EvictedPrefix, LoadBalancer, RoutingRequest
from tercet.ipc.control_messages import CONTROL_MESSAGE_TYPES, ControlReply, ControlRequest
from tercet.ipc.decode_limits import DecodeLimits, MessageOverLimitsError
from tercet.ipc.messages import (
    CORE_MESSAGE_TYPES,
    FinishKind,
    FinishReason,
    MessageRegistry,
    TokenLogprobs,
    UnknownMessageError,
)
from tercet.lora.backend import LoraBackend, LoraPart, LoraSegment, LoraWeights
from tercet.model.architecture import EncoderArchitecture, ModelArchitecture
from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.model.attention_factory import AttentionBackendFactory
from tercet.model.linear_method import LinearMethod, LinearTarget
from tercet.model.native_calls import NativeAttention, NativeMatmul
from tercet.native.build import NativeBuildError, NativeSource
from tercet.native.build import load_library as load_native_library
from tercet.native.cpu import cpu_features, level_in_use, runnable_levels
from tercet.native.levels import IsaLevel
from tercet.plugin_host.compatibility import API_VERSION
from tercet.plugin_host.hookspecs import hookimpl
from tercet.reasoning.parser import ReasoningFrame, ReasoningParser, ReasoningPiece, ReasoningStream
from tercet.reasoning.tags import TaggedReasoningParser
from tercet.sampling_params import SamplingParams
from tercet.scheduler.grammar.grammar_backend import (
    MAX_ROLLBACK,
    GrammarBackend,
    GrammarError,
    GrammarMatcher,
    GrammarTokenizer,
)
from tercet.scheduler.kv_tiers.storage import KVStorage
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.scheduler.policy_views import CachedPrefix, PrefixCacheView, RequestView
from tercet.scheduler.speculative.proposer import DraftModel, DraftRequest, Proposer
from tercet.scheduler.stats import SchedulerStats
from tercet.tools.tool_calls import (
    CallObjectStream,
    ToolCall,
    ToolCallParse,
    ToolCallParser,
    ToolCallStream,
    read_call_object,
)

__all__ = [
    "API_VERSION",
    "AttentionBackend",
    "AttentionBackendFactory",
    "AttentionLayout",
    "CONTROL_MESSAGE_TYPES",
    "CORE_MESSAGE_TYPES",
    "CachedPrefix",
    "CallObjectStream",
    "ConfigError",
    "ContainedFailures",
    "ControlReply",
    "ControlRequest",
    "DecodeLimits",
    "DraftModel",
    "DraftRequest",
    "EncoderArchitecture",
    "EvictedPrefix",
    "FinishKind",
    "FinishReason",
    "GenerateOutput",
    "GenerateRequest",
    "GrammarBackend",
    "GrammarError",
    "GrammarMatcher",
    "GrammarTokenizer",
    "IsaLevel",
    "KVStorage",
    "LinearMethod",
    "LinearTarget",
    "LoadBalancer",
    "LoraBackend",
    "LoraPart",
    "LoraSegment",
    "LoraWeights",
    "MAX_ROLLBACK",
    "MessageOverLimitsError",
    "MessageRegistry",
    "ModelArchitecture",
    "NativeAttention",
    "NativeBuildError",
    "NativeMatmul",
    "NativeSource",
    "PrefixCacheView",
    "Proposer",
    "ReasoningFrame",
    "ReasoningParser",
    "ReasoningPiece",
    "ReasoningStream",
    "RequestError",
    "RequestView",
    "RoutingRequest",
    "SamplingParams",
    "SchedulerStats",
    "SchedulerView",
    "SchedulingPolicy",
    "TaggedReasoningParser",
    "TercetError",
    "TokenLogprobs",
    "ToolCall",
    "ToolCallParse",
    "ToolCallParser",
    "ToolCallStream",
    "UnknownMessageError",
    "cpu_features",
    "default_cache_dir",
    "hookimpl",
    "level_in_use",
    "load_native_library",
    "parse_byte_size",
    "read_call_object",
    "runnable_levels",
]
