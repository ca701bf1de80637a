"""The HTTP front end over the TokenizerManager, a folder per protocol (``openai/``, ``native/``,
``anthropic/``, ``responses/``, and ``chat/``, the bridge those two share), ``control/``, ``openapi/``
and ``server/``; each body is parsed and checked once, in its protocol's folder. The modules at this
level serve every protocol (errors, SSE, a generation's consumption, the fields every parser reads,
log-probabilities' formats) and import no folder of http's; the folders import only those below them
(``pyproject.toml``'s contract for ``tercet.http``).
May import: frontend and everything below it; never scheduler, model or torch.
"""
