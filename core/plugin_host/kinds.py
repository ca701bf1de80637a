"""The table of component kinds: every kind of replaceable part, one entry each.

An entry names the register hook (its hookspec is made from the entry, with
the entry's text as its documentation), the kind as users see it, the
attribute of :class:`tercet.plugin_host.manager.PluginRegistries` that holds the
registrations, the config key that chooses one (``None`` where every
registration is used, as for message types) and what a registered factory
is called with and must return. Adding a kind is adding an entry here, plus
the config key's field where the entry names one; the hookspec, the registry,
the check of the configured name at start-up and ``tercet plugins`` follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tercet.plugin_host.http_route import http_route_registration


@dataclass(frozen=True)
class ComponentKind:
    hook: str
    kind: str
    registry: str
    # (section, key) of the config value naming the implementation to use.
    config_key: tuple[str, str] | None
    # The hook's documentation: what register() takes and what the factory must return.
    doc: str
    # Values of the config key that name no registration (``"auto"``): the
    # component resolves them itself; ``registries.chosen`` answers None.
    extra_choices: tuple[str, ...] = ()
    # What register()'s arguments become: the (name, object) the registry keeps.
    # None: register(name, obj) itself.
    registration: Callable[..., tuple[str, Any]] | None = None
    # How `tercet plugin new` spells the kind, where not the kind with hyphens.
    slug: str | None = None
    # Whether an implementation may be installed yet unable to run here (a missing extra, no
    # GPU): ``tercet plugins`` then shows each one's availability, asked of its factory's
    # ``unavailable_reason()`` (None: available; a factory without one is always available).
    shows_availability: bool = False


COMPONENT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind(
        hook="register_serializers",
        kind="serializer",
        registry="serializers",
        config_key=("ipc", "serializer"),
        doc="""Register message serializers, chosen by ``[ipc] serializer``.

    ``register(name, factory)`` where ``factory(message_registry)`` returns an
    object with ``encode(message) -> bytes`` and ``decode(bytes) -> message``.
    A serializer must only ever produce instances of types in the registry:
    an unknown tag is an error, never an arbitrary object. Bytes come from
    whoever can write to a socket, so ``decode`` must also keep the registry's
    :class:`tercet.plugin_api.DecodeLimits` (``message_registry.limits``):
    refuse a frame over ``max_bytes`` before reading it, a message nested past
    ``max_nested_messages`` before recursing into it, and a decoded value
    deeper than ``max_depth`` (``limits.check_depth``), each by raising
    :class:`tercet.plugin_api.MessageOverLimitsError`; the receiver drops and
    counts the frame (``message_over_limits``).
    """,
    ),
    ComponentKind(
        hook="register_transports",
        kind="transport",
        registry="transports",
        config_key=("ipc", "transport"),
        doc="""Register IPC transports, chosen by ``[ipc] transport``.

    ``register(name, factory)`` where ``factory(ipc_config)`` returns an object
    with ``endpoint(name: str, runtime_dir: str) -> str``: the ZeroMQ address
    for the named edge (for example ``ipc://…`` or ``tcp://host:port``).
    Endpoints are named once, in :class:`tercet.ipc.port_args.PortArgs`, before
    any process starts.
    """,
    ),
    ComponentKind(
        hook="register_scheduling_policies",
        kind="scheduling policy",
        registry="scheduling_policies",
        config_key=("scheduler", "policy"),
        doc="""Register scheduling policies, chosen by ``[scheduler] policy``.

    ``register(name, factory)`` where ``factory(config)`` takes the resolved
    :class:`tercet.config.TercetConfig` (a policy reads its own options from
    ``config.plugins[<name>]``) and returns a
    :class:`tercet.scheduler.policy.SchedulingPolicy`: ``order(waiting, view)``
    gives the waiting requests in the order to try admitting them (the
    scheduler admits in that order while KV memory, the batch cap and the
    step's prefill budget allow), and ``choose_preemption_victim(candidate,
    running)`` may name a running request to send back to the queue. A policy
    that raises, or answers something else, is bypassed for that step (arrival
    order, no preemption), and the failure is counted against its plugin.
    """,
    ),
    ComponentKind(
        hook="register_load_balancers",
        kind="load balancer",
        registry="load_balancers",
        config_key=("scheduler", "load_balance"),
        doc="""Register load balancers, chosen by ``[scheduler] load_balance``: which
    data-parallel rank serves each prompt.

    ``register(name, factory)`` where ``factory(config, num_ranks)`` takes the
    resolved :class:`tercet.config.TercetConfig` (a balancer reads its own options
    from ``config.plugins[<name>]``) and the number of ranks, and returns a
    :class:`tercet.frontend.load_balancer.LoadBalancer`: ``choose_rank(request,
    loads)`` answers the rank for a :class:`tercet.frontend.load_balancer.RoutingRequest`
    (its id, prompt token ids, LoRA adapter and number of completions), ``loads``
    being the completions this API worker has in flight on each rank; then
    ``routed(request, rank)``, ``finished(rid, rank)`` for each of its completions,
    and ``evicted(rank, prefixes)``, with what a rank's prefix cache dropped (each
    a :class:`tercet.frontend.load_balancer.EvictedPrefix`; each rank reports them
    between its steps), tell it what follows.
    Built in the API process, one per API worker, and called on its event loop:
    a call must be quick and never block. A ``choose_rank`` that raises, or
    answers no rank, sends that prompt to the rank with the fewest completions in
    flight; any failing call is counted against its plugin. The built-ins are
    ``round_robin`` (the default), ``shortest_queue`` and ``cache_aware``.
    """,
    ),
    ComponentKind(
        hook="register_detokenizers",
        kind="detokenizer",
        registry="detokenizers",
        config_key=("detokenizer", "strategy"),
        doc="""Register detokenization strategies, chosen by ``[detokenizer] strategy``.

    ``register(name, factory)`` where ``factory(tokenizer)`` returns an object
    with ``start(rid, skip_special_tokens)``, ``append(rid, token_ids) -> str``
    (the new, complete text since the previous call) and ``finish(rid) -> str``
    (any text held back, flushed; the strategy then drops the request's state).
    ``finish`` is called for every request that was started, aborted ones
    included. A call that raises ends that request alone, with an internal error.
    """,
    ),
    ComponentKind(
        hook="register_attention_backends",
        kind="attention backend",
        registry="attention_backends",
        config_key=("attention", "backend"),
        extra_choices=("auto",),
        shows_availability=True,
        doc="""Register attention backends, chosen by ``[attention] backend``.

    ``register(name, factory)`` where ``factory(layout)`` takes a
    :class:`tercet.model.attention.AttentionLayout` and returns a
    :class:`tercet.model.attention.AttentionBackend`: attention of a whole
    batch over the paged KV cache, one call per layer per step. A backend
    that needs what may be missing (an extra, a GPU) gives its factory an
    ``unavailable_reason`` attribute, a callable answering why it cannot run
    here or None; ``tercet plugins`` shows it, and the factory itself raises
    :class:`tercet.plugin_api.ConfigError` with that reason when chosen.
    ``backend = "auto"`` (the default) is ``paged_cpu`` on a CPU and
    ``torch_native`` elsewhere.
    """,
    ),
    ComponentKind(
        hook="register_linear_methods",
        kind="linear method",
        registry="linear_methods",
        config_key=("model", "quantization"),
        extra_choices=("auto", "none"),
        doc="""Register linear methods, chosen by ``[model] quantization``.

    ``register(name, factory)`` where ``factory()`` returns a
    :class:`tercet.model.linear_method.LinearMethod`: how a checkpoint's tensor
    becomes a linear layer's weights, and how that layer's forward runs.
    ``quantization = "auto"`` serves each tensor in the format it was shipped
    in (a GGUF's Q4_1 tensors with ``q4_1``, dense tensors with ``dense``);
    ``"none"`` is ``dense`` for every layer; any other value names the method
    used for every linear layer.
    """,
    ),
    ComponentKind(
        hook="register_grammar_backends",
        kind="grammar backend",
        registry="grammar_backends",
        config_key=("grammar", "backend"),
        doc="""Register grammar backends (constrained decoding), chosen by ``[grammar] backend``.

    ``register(name, factory)`` where ``factory(tokenizer)`` takes a
    :class:`tercet.scheduler.grammar.grammar_backend.GrammarTokenizer` and returns a
    :class:`tercet.scheduler.grammar.grammar_backend.GrammarBackend`: ``compile(kind, text)`` (called in
    one of several compile threads, never on the scheduler's loop, and abandoned, not
    interrupted, past ``[grammar] compile_timeout``; raise
    :class:`tercet.scheduler.grammar.grammar_backend.GrammarError` for a constraint it cannot compile,
    which fails that request alone with a 400) and ``matcher(compiled)``, a
    :class:`tercet.scheduler.grammar.grammar_backend.GrammarMatcher` per completion that fills the
    step's token bitmask and advances on each sampled token.
    """,
    ),
    ComponentKind(
        hook="register_tool_call_parsers",
        kind="tool-call parser",
        registry="tool_call_parsers",
        config_key=("tools", "parser"),
        doc="""Register tool-call parsers, chosen by ``[tools] parser``.

    ``register(name, factory)`` where ``factory()`` returns a
    :class:`tercet.tools.tool_calls.ToolCallParser`: one tool-call format. It finds
    the calls in a chat completion's text (incrementally, so they stream: its
    ``stream()`` reads one streamed completion, and should read only what each
    piece adds), and writes tools, past calls and tool results as text for a
    model whose chat template cannot render them. It runs in the API server's
    process; a call that raises ends that request alone with a 500, counted
    against its plugin.
    """,
    ),
    ComponentKind(
        hook="register_reasoning_parsers",
        kind="reasoning parser",
        registry="reasoning_parsers",
        config_key=("reasoning", "parser"),
        extra_choices=("none",),
        doc="""Register reasoning parsers, chosen by ``[reasoning] parser`` (``"none"``, the
    default, separates nothing).

    ``register(name, factory)`` where ``factory(reasoning_config)`` takes the
    ``[reasoning]`` section (``starts_in_reasoning``: the chat template opens the
    reasoning, so the output starts inside it) and returns a
    :class:`tercet.reasoning.parser.ReasoningParser`: ``stream()`` reads one
    completion incrementally (``feed(text)`` and ``finish()``, each answering a
    :class:`tercet.reasoning.parser.ReasoningPiece` of reasoning and content, and
    never a marker or a piece of reasoning as content, whatever the pieces), and
    ``frame`` gives the markers as a :class:`tercet.reasoning.parser.ReasoningFrame`,
    after which a JSON Schema or a forced tool call is applied (None: from the
    start). :class:`tercet.reasoning.tags.TaggedReasoningParser` does this for any
    pair of tags. It runs in the API server's process; a call that raises ends
    that request alone with a 500, counted against its plugin.
    """,
    ),
    ComponentKind(
        hook="register_speculative_proposers",
        kind="speculative proposer",
        registry="speculative_proposers",
        config_key=("speculative", "proposer"),
        extra_choices=("none",),
        doc="""Register draft proposers for speculative decoding, chosen by ``[speculative] proposer``.

    ``register(name, factory)`` where ``factory(config)`` takes the resolved
    :class:`tercet.config.TercetConfig` and returns a
    :class:`tercet.scheduler.speculative.proposer.Proposer`: ``propose(requests)`` gets a
    read-only :class:`tercet.scheduler.speculative.proposer.DraftRequest` for each decoding
    request that may speculate this step (its prompt and output tokens, and
    the most drafts it may take) and answers a list of draft token ids for
    each, in order (empty: no guess); ``forget(rid)`` drops any state kept for
    a request that left. The scheduler verifies every draft in one forward
    with the target model, so a wrong guess costs time, never output: the
    tokens emitted are the target's. A proposer that raises, or answers
    something malformed, gives no drafts that step, counted against its
    plugin. With tensor parallelism every rank asks its own proposer, so its
    drafts must be a pure function of what it is shown (as ``ngram``'s are).
    A factory may instead return a :class:`tercet.scheduler.speculative.proposer.DraftModel`
    naming a checkpoint to draft with: the scheduler loads it with a KV pool of
    its own and drafts greedily with it (:mod:`tercet.scheduler.speculative.model_drafter`).
    ``proposer = "none"`` (the default) turns speculation off.
    """,
    ),
    ComponentKind(
        hook="register_lora_backends",
        kind="LoRA backend",
        registry="lora_backends",
        config_key=("lora", "backend"),
        slug="lora-backend",
        doc="""Register LoRA backends, chosen by ``[lora] backend`` (``torch``, the default).

    ``register(name, factory)`` where ``factory()`` returns a
    :class:`tercet.lora.backend.LoraBackend`: ``add_deltas(output, x, segments)``
    adds, in place, the LoRA delta of each segment of a step's rows that share
    one adapter (a :class:`tercet.lora.backend.LoraSegment`: its rows and the
    adapter's :class:`tercet.lora.backend.LoraWeights` for the projection) to a
    projection's output, which the base layer computed with its own linear
    method. Called in the scheduler process, once per adapted projection per
    step that carries an adapter; steps of the base model alone never call it.
    A failure ends the step as any failure of the forward does.
    """,
    ),
    ComponentKind(
        hook="register_kv_storages",
        kind="KV storage",
        registry="kv_storages",
        config_key=("cache", "storage"),
        extra_choices=("none",),
        slug="kv-storage",
        doc="""Register KV storage tiers below the KV pool, chosen by ``[cache] storage`` (``"none"``,
    the default, keeps the prefix cache in the pool alone).

    ``register(name, factory)`` where ``factory(config)`` takes the resolved
    :class:`tercet.config.TercetConfig` (a tier reads its own options from
    ``config.plugins[<name>]``) and returns a
    :class:`tercet.scheduler.kv_tiers.storage.KVStorage`: ``put(key, data)``,
    ``get(key) -> bytes | None`` and ``contains(key) -> bool``, where ``key`` is
    a hex string naming one page of K/V by the hash of its token chain (every
    token from the start of the sequence to the end of the page, and what makes
    pages incompatible: the model, the KV dtype, the page size and shape, the LoRA
    adapter). The prefix cache puts the pages it evicts from the pool there, in
    a background thread, and reads them back, also in the background, for a
    request whose prefix continues below the pool. ``data`` carries its own
    checksum, verified before a page is used: a tier may lose or garble pages
    (a page that fails the check is dropped, its ``discard(key)`` called), but
    must be safe to call from two threads at once. ``persistent = True`` says
    pages survive a restart. The built-ins are ``host`` (an LRU in this
    process's memory, ``[cache] host_bytes``) and ``file`` (a directory,
    ``[cache] file_dir`` and ``file_bytes``, shareable by several servers).
    Called in the scheduler process; a failure of a call loses that page, counted
    against its plugin, and the request computes it instead.
    """,
    ),
    ComponentKind(
        hook="register_model_architectures",
        kind="model architecture",
        registry="model_architectures",
        # Chosen by the checkpoint, not the config: its config.json's "architectures".
        config_key=None,
        doc="""Register model architectures, by the name a checkpoint's ``config.json`` gives
    in ``architectures`` (``"LlamaForCausalLM"``; a GGUF's family maps the same way).

    ``register(name, factory)`` where ``factory()`` returns a
    :class:`tercet.model.architecture.ModelArchitecture`: ``shape(config)``
    (the sizes that size the KV pool and split the model), ``create(config,
    dtype, device, max_positions, tp)`` (the model, running over the paged
    KV cache as the built-in Llama does) and ``load_weights(model,
    checkpoint, linear_methods)``; a decoder whose model also gives
    ``final_hidden_states(batch)`` can serve embeddings (``[model] pooling``).
    An encoder-only model (the built-in BERT) is a
    :class:`tercet.model.architecture.EncoderArchitecture` instead:
    ``create(config, dtype, device)`` and ``load_weights(model, checkpoint)``,
    its model giving the final hidden states of whole sequences; it embeds and
    cannot generate. Called in the scheduler process, when it loads the model;
    a checkpoint whose architecture no plugin registers is a start-up error
    listing the registered ones.
    """,
    ),
    ComponentKind(
        hook="register_http_routes",
        kind="HTTP route",
        registry="http_routes",
        # Every registered route is served; a deployment drops one by disabling its plugin.
        config_key=None,
        registration=http_route_registration,
        slug="route",
        doc="""Register HTTP routes of the API server, each under its path.

    ``register(path, endpoint, methods=["GET"], *, openapi=None,
    needs_children=True, generates=False, error_body=None)`` where
    ``endpoint(request, tokenizer_manager)`` is an async function returning a
    starlette response (or a ``"module:function"`` string naming one, imported
    only when the app is built). ``openapi`` is the path's OpenAPI path item
    (``{"post": {...}}``, or a ``"module:attribute"`` naming one), listed in
    ``/openapi.json``; ``needs_children=False`` for a route that answers from
    the API process alone (it is not answered 503 once a child died);
    ``generates=True`` for a route that generates text (400 on an encoder-only
    model); ``error_body(message, status, param, code)`` builds the route's
    error body in its protocol's shape (OpenAI's by default). Every route gets
    the API key check, the body limit and the browser guard of the built-in
    ones; a ``RequestError`` it raises becomes that status in its error shape,
    and any other exception a 500, counted against its plugin. Two plugins
    registering one path, or a plugin registering a path tercet serves itself
    (``/health``, ``/metrics``, ``/openapi.json``, ``/``), is a start-up error
    naming both. tercet's own APIs are plugins of this kind (``openai_routes``,
    ``native_routes``, ``control_routes``, ``anthropic_routes``, ``responses_routes``):
    ``[plugins] disable`` drops one.
    """,
    ),
    ComponentKind(
        hook="register_message_types",
        kind="message type",
        registry="message_types",
        config_key=None,
        doc="""Register IPC message types under stable tags.

    ``register(tag, cls)`` where ``cls`` is a dataclass. Tags are part of the
    wire format: never reuse or change one. Only registered types cross a
    process boundary, and each received message is checked against its
    class's field annotations before any handler sees it.
    """,
    ),
)

KINDS_BY_HOOK = {kind.hook: kind for kind in COMPONENT_KINDS}
KINDS_BY_REGISTRY = {kind.registry: kind for kind in COMPONENT_KINDS}
