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

Nothing here imports torch or another heavy library: plugins are imported in
every process.
"""

from __future__ import annotations

from tercet.containment import ContainedFailures
from tercet.control_messages import ControlReply, ControlRequest
from tercet.errors import ConfigError, RequestError, TercetError
from tercet.grammar import GrammarBackend, GrammarError, GrammarMatcher, GrammarTokenizer
from tercet.hookspecs import hookimpl
from tercet.io_struct import GenerateOutput, GenerateRequest
from tercet.messages import FinishReason, MessageRegistry, TokenLogprobs, UnknownMessageError
from tercet.model.attention import AttentionBackend, AttentionLayout
from tercet.sampling_params import SamplingParams
from tercet.scheduler.policy import SchedulerView, SchedulingPolicy
from tercet.scheduler.policy_views import CachedPrefix, PrefixCacheView, RequestView
from tercet.scheduler.stats import SchedulerStats
from tercet.tool_calls import ToolCall, ToolCallParse, ToolCallParser, read_call_object

API_VERSION = "1.0"

__all__ = [
    "API_VERSION",
    "AttentionBackend",
    "AttentionLayout",
    "CachedPrefix",
    "ConfigError",
    "ContainedFailures",
    "ControlReply",
    "ControlRequest",
    "FinishReason",
    "GenerateOutput",
    "GenerateRequest",
    "GrammarBackend",
    "GrammarError",
    "GrammarMatcher",
    "GrammarTokenizer",
    "MessageRegistry",
    "PrefixCacheView",
    "RequestError",
    "RequestView",
    "SamplingParams",
    "SchedulerStats",
    "SchedulerView",
    "SchedulingPolicy",
    "TercetError",
    "TokenLogprobs",
    "ToolCall",
    "ToolCallParse",
    "ToolCallParser",
    "UnknownMessageError",
    "hookimpl",
    "read_call_object",
]
