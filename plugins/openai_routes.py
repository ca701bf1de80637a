"""The OpenAI-compatible API as HTTP routes: completions, chat completions, models, embeddings.

The handlers are tercet's own (``tercet.http.openai.openai_api``, ``tercet.http.openai.embeddings_api``),
named by reference so that nothing of them is imported until the API server builds its app.
Disable this plugin (``[plugins] disable = ["openai_routes"]``) to serve no OpenAI API.
"""

from tercet.plugin_api import hookimpl

HANDLERS = "tercet.http.openai.openai_api"
PATHS = "tercet.http.openapi.openapi_paths"


@hookimpl
def register_http_routes(register):
    register("/v1/completions", f"{HANDLERS}:create_completion", ["POST"], openapi=f"{PATHS}:COMPLETIONS",
             generates=True)
    register("/v1/chat/completions", f"{HANDLERS}:create_chat_completion", ["POST"],
             openapi=f"{PATHS}:CHAT_COMPLETIONS", generates=True)
    # Answered from the configuration alone: these need no child process.
    register("/v1/models", f"{HANDLERS}:list_models", ["GET"], openapi=f"{PATHS}:MODELS", needs_children=False)
    register("/v1/models/{model:path}", f"{HANDLERS}:retrieve_model", ["GET"], openapi=f"{PATHS}:MODEL",
             needs_children=False)
    register("/v1/embeddings", "tercet.http.openai.embeddings_api:create_embedding", ["POST"],
             openapi=f"{PATHS}:EMBEDDINGS")
