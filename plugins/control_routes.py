"""The control plane as HTTP routes, SGLang's: flush the cache, server info, abort, pause, resume, new weights,
LoRA adapters loaded and unloaded, torch profiles recorded.

Each is a fan-out to every data-parallel rank (``tercet.http.control.control_api``, named by
reference so that nothing of it is imported until the API server builds its app).
"""

from tercet.plugin_api import hookimpl

HANDLERS = "tercet.http.control.control_api"
PATHS = "tercet.http.openapi.openapi_paths"
ROUTES = (
    ("/flush_cache", "flush_cache", "POST", "FLUSH_CACHE"),
    ("/get_server_info", "get_server_info", "GET", "GET_SERVER_INFO"),
    ("/abort_request", "abort_request", "POST", "ABORT_REQUEST"),
    ("/pause_generation", "pause_generation", "POST", "PAUSE_GENERATION"),
    ("/continue_generation", "continue_generation", "POST", "CONTINUE_GENERATION"),
    ("/update_weights_from_disk", "update_weights_from_disk", "POST", "UPDATE_WEIGHTS_FROM_DISK"),
)
LORA_HANDLERS = "tercet.http.control.lora_api"
LORA_ROUTES = (
    ("/load_lora_adapter", "load_lora_adapter", "POST", "LOAD_LORA_ADAPTER"),
    ("/unload_lora_adapter", "unload_lora_adapter", "POST", "UNLOAD_LORA_ADAPTER"),
)

PROFILE_HANDLERS = "tercet.http.control.profile_api"
PROFILE_ROUTES = (
    ("/start_profile", "start_profile", "POST", "START_PROFILE"),
    ("/stop_profile", "stop_profile", "POST", "STOP_PROFILE"),
)
# Saved sessions: a conversation's cached prefix kept in the file tier under a name (needs [cache] storage = "file").
SESSION_HANDLERS = "tercet.http.control.session_api"
SESSION_PATHS = "tercet.http.openapi.openapi_sessions"
SESSION_ROUTES = (
    ("/sessions/{name}/save", "save_session", "POST", "SAVE_SESSION"),
    ("/sessions/{name}/restore", "restore_session", "POST", "RESTORE_SESSION"),
)


@hookimpl
def register_http_routes(register):
    for path, handler, method, path_item in SESSION_ROUTES:
        register(path, f"{SESSION_HANDLERS}:{handler}", [method], openapi=f"{SESSION_PATHS}:{path_item}")
    for handlers, routes in ((HANDLERS, ROUTES), (LORA_HANDLERS, LORA_ROUTES), (PROFILE_HANDLERS, PROFILE_ROUTES)):
        for path, handler, method, path_item in routes:
            register(path, f"{handlers}:{handler}", [method], openapi=f"{PATHS}:{path_item}")
