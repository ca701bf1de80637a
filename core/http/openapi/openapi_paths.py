"""The OpenAPI path items of tercet's built-in routes, one constant per path.

The built-in route plugins name these (``openapi="tercet.http.openapi.openapi_paths:GENERATE"``),
as a third party passes its own path item; their request schemas are in
:mod:`tercet.http.openapi.openapi_schemas`, under ``components`` of the document.
"""

from __future__ import annotations

from tercet.http.control.control_api import TIMEOUT_RANGE
from tercet.http.control.profile_api import ACTIVITY_NAMES, NUM_STEPS_RANGE, SECONDS_RANGE
from tercet.http.openapi.openapi_operations import (
                                   generation_operation,
                                   json_content,
                                   operation,
                                   request_body,
                                   responses,
)
from tercet.http.openapi.openapi_schemas import nullable, object_schema, ranged

GENERATE = generation_operation("generate", "SGLang-style native generation", "GenerateRequest", "the generation")
COMPLETIONS = generation_operation("createCompletion", "OpenAI-compatible text completion", "CompletionRequest",
                                   "the completion")
CHAT_COMPLETIONS = generation_operation("createChatCompletion", "OpenAI-compatible chat completion",
                                        "ChatCompletionRequest", "the chat completion")
EMBEDDINGS = {"post": operation(
    "createEmbedding",
    "OpenAI-compatible embeddings (a model that pools: an encoder, or a decoder with [model] pooling)",
    responses(json_content({"$ref": "#/components/schemas/EmbeddingResponse"}, "the embeddings"),
              "400", "401", "404", "413", "429", "500", "503"),
    request_body({"$ref": "#/components/schemas/EmbeddingRequest"}),
)}

_MODEL_REF = {"$ref": "#/components/schemas/Model"}
MODELS = {"get": operation("listModels", "The served model", responses(json_content(object_schema(
    {"object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": _MODEL_REF}},
    required=("object", "data"),
), "the model"), "401"))}
MODEL = {"get": {
    **operation("retrieveModel", "The served model, by its id",
                responses(json_content(_MODEL_REF, "the model"), "401", "404")),
    # ``minLength``: an empty id would be the path "/v1/models/", a different route.
    "parameters": [{"name": "model", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}],
}}

_DONE = json_content({"type": "object"}, "done")
_TIMEOUT = object_schema({"timeout": nullable(ranged(TIMEOUT_RANGE, description="seconds to wait for idle"))})
_RID = {"type": "string", "minLength": 1}
_ABORT = object_schema(
    {"rid": nullable(_RID), "abort_all": nullable({"type": "boolean"})},
    # A rid, or abort_all set to true: each branch holds one, non-nullable.
    anyOf=[
        object_schema({"rid": _RID}, required=("rid",)),
        object_schema({"abort_all": {"type": "boolean", "enum": [True]}}, required=("abort_all",)),
    ],
)
_UPDATE = object_schema(
    {
        "model_path": {"type": "string", "minLength": 1, "description": "a checkpoint directory on the server"},
        "timeout": nullable(ranged(TIMEOUT_RANGE)),
    },
    required=("model_path",),
)
FLUSH_CACHE = {"post": operation("flushCache", "Flush the prefix cache", responses(_DONE, "400", "401", "409", "413"),
                                 request_body(_TIMEOUT, False))}
GET_SERVER_INFO = {"get": operation("getServerInfo", "Configuration and rank states", responses(_DONE, "401"))}
ABORT_REQUEST = {"post": operation("abortRequest", "Abort one request or all", responses(_DONE, "400", "401", "413"),
                                   request_body(_ABORT))}
PAUSE_GENERATION = {"post": operation("pauseGeneration", "Pause the schedulers", responses(_DONE, "401"))}
CONTINUE_GENERATION = {"post": operation("continueGeneration", "Resume the schedulers", responses(_DONE, "401"))}
_LOAD_LORA = object_schema(
    {"lora_name": {"type": "string", "minLength": 1, "description": "the name requests pick it by"},
     "lora_path": {"type": "string", "minLength": 1, "description": "a PEFT adapter directory on the server"}},
    required=("lora_name", "lora_path"),
)
_UNLOAD_LORA = object_schema({"lora_name": {"type": "string", "minLength": 1}}, required=("lora_name",))
LOAD_LORA_ADAPTER = {"post": operation("loadLoraAdapter", "Load a LoRA adapter on every rank",
                                       responses(_DONE, "400", "401", "413", "503"), request_body(_LOAD_LORA))}
UNLOAD_LORA_ADAPTER = {"post": operation("unloadLoraAdapter", "Unload a LoRA adapter no request uses",
                                         responses(_DONE, "400", "401", "404", "409", "413"),
                                         request_body(_UNLOAD_LORA))}
UPDATE_WEIGHTS_FROM_DISK = {"post": operation("updateWeightsFromDisk", "Load new weights",
                                              responses(_DONE, "400", "401", "413"), request_body(_UPDATE))}
_START_PROFILE = object_schema({
    "output_dir": nullable({"type": "string", "minLength": 1,
                            "description": "a directory relative to [server] profile_dir (default: date and time)"}),
    "activities": nullable({"type": "array", "items": {"type": "string", "enum": list(ACTIVITY_NAMES)},
                            "minItems": 1, "uniqueItems": True}),
    "seconds": nullable(ranged(SECONDS_RANGE, description="record this long, then answer with the traces")),
    "num_steps": nullable({"type": "integer", "minimum": NUM_STEPS_RANGE.minimum, "maximum": NUM_STEPS_RANGE.maximum,
                           "description": "record this many model steps per rank, then answer with the traces"}),
    "timeout": nullable(ranged(TIMEOUT_RANGE, description="seconds num_steps may take at most")),
})
START_PROFILE = {"post": operation("startProfile", "Record a torch profile on every rank",
                                   responses(_DONE, "400", "401", "409", "413"), request_body(_START_PROFILE, False))}
STOP_PROFILE = {"post": operation("stopProfile", "End the recording; every rank's trace file",
                                  responses(_DONE, "401", "409"))}
