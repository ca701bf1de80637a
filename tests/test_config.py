import json

import pytest

from tercet.config import (
    TercetConfig,
    check_plugin_choices,
    load_config,
    parse_set_options,
)
from tercet.config_display import config_as_toml, config_shown
from tercet.errors import ConfigError
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager


def test_defaults_match_the_documented_names():
    config = load_config(environ={})
    assert config == TercetConfig()
    assert (config.server.host, config.server.port) == ("127.0.0.1", 30000)
    assert config.ipc.transport == "ipc" and config.ipc.serializer == "msgpack"
    assert config.scheduler.policy == "fcfs"
    assert config.attention.backend == "auto"
    assert config.server.max_prompts_per_request == 256
    overrides = parse_set_options(["server.max_prompts_per_request=8"])
    assert load_config(environ={}, overrides=overrides).server.max_prompts_per_request == 8
    assert config.detokenizer.strategy == "incremental"


def test_precedence_defaults_toml_environment_command_line(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[server]\nport = 1111\nhost = "0.0.0.0"\n[scheduler]\nmax_running_requests = 3\n')
    environ = {"TERCET_SERVER_PORT": "2222", "TERCET_CACHE_DIR": "/not/a/key"}
    config = load_config(str(toml), environ=environ, overrides=parse_set_options(["server.port=3333"]))
    assert config.server.port == 3333
    assert config.server.host == "0.0.0.0"
    assert config.scheduler.max_running_requests == 3
    assert load_config(str(toml), environ=environ).server.port == 2222


def test_environment_names_sections_and_keys():
    assert load_config(environ={"TERCET_SCHEDULER_MAX_RUNNING_REQUESTS": "5"}).scheduler.max_running_requests == 5
    # Not one of our sections: left to whoever set it.
    assert load_config(environ={"TERCET_SOMETHING_ELSE": "1"}) == TercetConfig()
    with pytest.raises(ConfigError, match="environment: unknown key server.colour"):
        load_config(environ={"TERCET_SERVER_COLOUR": "blue"})
    with pytest.raises(ConfigError, match="environment: server.port must be an integer"):
        load_config(environ={"TERCET_SERVER_PORT": "eighty"})


def test_config_file_from_environment(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text("[cache]\npage_size = 4\n")
    assert load_config(environ={"TERCET_CONFIG": str(toml)}).cache.page_size == 4


@pytest.mark.parametrize(
    "assignment, named",
    [
        ("scheduler.nope=1", "scheduler.nope"),
        ("nosuch.key=1", "[nosuch]"),
        ("model.dtype=float16", "model.dtype"),
        ("server.port=abc", "server.port"),
        ("cache.page_size=0", "cache.page_size"),
        ("cache.prefix_cache=maybe", "cache.prefix_cache"),
        ("server.max_prompts_per_request=0", "server.max_prompts_per_request"),
    ],
)
def test_bad_keys_and_values_are_named(assignment, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("[", r"\[").replace("]", r"\]")):
        load_config(environ={}, overrides=parse_set_options([assignment]))


def test_choice_error_lists_allowed_values():
    with pytest.raises(ConfigError, match="float32.*bfloat16"):
        load_config(environ={}, overrides=parse_set_options(["model.dtype=half"]))


def test_the_kv_dtype_is_auto_unless_set_and_an_unknown_one_is_named_with_the_allowed(tmp_path):
    assert load_config(environ={}).cache.kv_dtype == "auto"
    toml = tmp_path / "int8.toml"
    toml.write_text('[cache]\nkv_dtype = "int8"\n')
    assert load_config(str(toml), environ={}).cache.kv_dtype == "int8"
    assert load_config(environ={"TERCET_CACHE_KV_DTYPE": "fp8_e4m3"}).cache.kv_dtype == "fp8_e4m3"
    with pytest.raises(ConfigError, match='cache.kv_dtype = "int4" is not allowed; allowed: "auto", "float32", '
                                          '"bfloat16", "int8", "fp8_e4m3"'):
        load_config(environ={}, overrides=parse_set_options(["cache.kv_dtype=int4"]))


def test_toml_type_errors_are_named(tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text('[server]\nport = "eighty"\n')
    with pytest.raises(ConfigError, match="server.port must be an integer"):
        load_config(str(toml), environ={})


def test_invalid_toml_and_missing_file(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(broken), environ={})
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "missing.toml"), environ={})


def test_optional_values_and_plugin_tables(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[model]\nserved_model_name = "smol"\n[plugins.fair_share]\nweights = {a = 2}\n')
    overrides = parse_set_options(["model.served_model_name=none", "plugins.fair_share.default=3"])
    config = load_config(str(toml), environ={}, overrides=overrides)
    assert config.model.served_model_name is None
    assert config.plugins == {"fair_share": {"weights": {"a": 2}, "default": 3}}


def test_malformed_set_option():
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_set_options(["server.port"])


def test_unknown_plugin_name_lists_available():
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    config = load_config(environ={}, overrides=parse_set_options(["detokenizer.strategy=nope"]))
    with pytest.raises(ConfigError, match="unknown detokenizer 'nope'; available: .*incremental"):
        check_plugin_choices(config, registries)


def test_config_as_toml_round_trips(tmp_path):
    config = load_config(environ={}, overrides=parse_set_options(["scheduler.max_running_requests=5", "server.api_key=s3cret"]))
    text = config_as_toml(config)
    assert "s3cret" not in text
    (tmp_path / "shown.toml").write_text(text.replace('api_key = "***"', 'api_key = "s3cret"'))
    assert load_config(str(tmp_path / "shown.toml"), environ={}) == config


def test_plugin_tables_round_trip_through_config_show(tmp_path):
    config = load_config(environ={}, overrides={"plugins": {"fair_share": {"weights": {"acme": 2, "hobby": 0.5}, "names": ["a"]}}})
    (tmp_path / "shown.toml").write_text(config_as_toml(config))
    assert load_config(str(tmp_path / "shown.toml"), environ={}).plugins == config.plugins


@pytest.mark.parametrize("placeholder", ["", "   ", "none", "None", "NULL", "null", " none "])
def test_an_empty_or_placeholder_api_key_is_an_error_naming_where_it_came_from(tmp_path, placeholder):
    """Such a key would silently turn authentication off (issue 12)."""
    named = "which would turn authentication off"
    with pytest.raises(ConfigError, match=f"environment: TERCET_SERVER_API_KEY is .*{named}"):
        load_config(environ={"TERCET_SERVER_API_KEY": placeholder})
    with pytest.raises(ConfigError, match=rf"command line: server\.api_key is .*{named}"):
        load_config(environ={}, overrides=parse_set_options([f"server.api_key={placeholder}"]))
    toml = tmp_path / "tercet.toml"
    toml.write_text(f'[server]\napi_key = "{placeholder}"\n')
    with pytest.raises(ConfigError, match=rf"config file {toml}: server\.api_key is .*{named}"):
        load_config(str(toml), environ={})


@pytest.mark.parametrize("padded", [" secret ", "secret ", "\tsecret", "secret\n"])
def test_an_api_key_with_whitespace_around_it_is_an_error_naming_where_it_came_from(tmp_path, padded):
    """No client can send those spaces (HTTP drops them around a header value): every request would get a 401."""
    named = "has whitespace around it .*no client can send"
    with pytest.raises(ConfigError, match=f"environment: TERCET_SERVER_API_KEY {named}"):
        load_config(environ={"TERCET_SERVER_API_KEY": padded})
    with pytest.raises(ConfigError, match=rf"command line: server\.api_key {named}"):
        load_config(environ={}, overrides={"server": {"api_key": padded}})
    toml = tmp_path / "tercet.toml"
    toml.write_text(f'[server]\napi_key = {json.dumps(padded)}\n')
    with pytest.raises(ConfigError, match=rf"config file {toml}: server\.api_key {named}"):
        load_config(str(toml), environ={})


def test_a_real_api_key_or_none_at_all_is_accepted(tmp_path):
    assert load_config(environ={}).server.api_key is None
    assert load_config(environ={"TERCET_SERVER_API_KEY": "s3cret"}).server.api_key == "s3cret"
    # A key that merely contains a placeholder word is a key.
    assert load_config(environ={}, overrides=parse_set_options(["server.api_key=none-of-yours"])).server.api_key == (
        "none-of-yours"
    )


def test_disabled_plugins_from_each_layer_the_last_one_wins(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[plugins]\ndisable = ["lof_policy", "random_policy"]\n\n[plugins.priority]\naging = 2.0\n')
    from_file = load_config(str(toml), environ={})
    assert from_file.disabled_plugins == ("lof_policy", "random_policy")
    assert from_file.plugins == {"priority": {"aging": 2.0}}
    from_environment = load_config(str(toml), environ={"TERCET_PLUGINS_DISABLE": "lpm_policy, lof_policy"})
    assert from_environment.disabled_plugins == ("lpm_policy", "lof_policy")
    from_command_line = load_config(
        str(toml), environ={"TERCET_PLUGINS_DISABLE": "lpm_policy"}, overrides=parse_set_options(["plugins.disable="])
    )
    assert from_command_line.disabled_plugins == ()
    shown = tmp_path / "shown.toml"
    shown.write_text(config_as_toml(from_file))
    assert load_config(str(shown), environ={}) == from_file


def test_a_disable_value_that_is_not_plugin_names_is_an_error(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text("[plugins]\ndisable = [1]\n")
    with pytest.raises(ConfigError, match="plugins.disable must be a list of plugin names"):
        load_config(str(toml), environ={})


def test_secrets_are_hidden_wherever_the_config_is_shown():
    config = load_config(environ={"TERCET_PARALLEL_NODE_SECRET": "a node secret of 24 chars"},
                         overrides=parse_set_options(["server.api_key=s3cret"]))
    assert config.parallel.node_secret == "a node secret of 24 chars"
    shown = config_shown(config)
    assert (shown["server"]["api_key"], shown["parallel"]["node_secret"]) == ("***", "***")
    assert "a node secret" not in config_as_toml(config) and "s3cret" not in config_as_toml(config)
    assert config_shown(TercetConfig())["parallel"]["node_secret"] is None


def test_allowed_origins_and_hosts_are_lists_from_every_layer(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[server]\nallowed_origins = ["https://app.example.com", "http://localhost:5173"]\n')
    from_file = load_config(str(toml), environ={})
    assert from_file.server.allowed_origins == ("https://app.example.com", "http://localhost:5173")
    assert from_file.server.allowed_hosts == ()
    from_environment = load_config(environ={"TERCET_SERVER_ALLOWED_HOSTS": "api.example.com, [::2]"})
    assert from_environment.server.allowed_hosts == ("api.example.com", "[::2]")
    assert load_config(environ={}, overrides=parse_set_options(["server.allowed_origins=*"])).server.allowed_origins == (
        "*",
    )
    shown = tmp_path / "shown.toml"
    shown.write_text(config_as_toml(from_file))
    assert load_config(str(shown), environ={}) == from_file


@pytest.mark.parametrize("assignment, named", [
    ("server.allowed_origins=app.example.com", "'app.example.com' is not an origin"),
    ("server.allowed_origins=https://app.example.com/path", "is not an origin"),
    ("server.allowed_hosts=api.example.com:443", "'api.example.com:443' is not a host name"),
])
def test_a_bad_allowed_origin_or_host_is_named(assignment, named):
    with pytest.raises(ConfigError, match=named):
        load_config(environ={}, overrides=parse_set_options([assignment]))


def test_an_allowed_origins_value_that_is_not_a_list_of_strings_is_an_error(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[server]\nallowed_origins = "https://app.example.com"\n')
    with pytest.raises(ConfigError, match="server.allowed_origins must be a list of non-empty strings"):
        load_config(str(toml), environ={})


def test_lora_adapters_are_a_table_of_names_and_paths_in_toml(tmp_path):
    toml = tmp_path / "tercet.toml"
    toml.write_text('[lora]\nadapters = { sql = "/adapters/sql", chat = "/adapters/chat" }\nmax_loaded = 2\n')
    lora = load_config(str(toml), environ={}).lora
    assert lora.adapter_paths == {"sql": "/adapters/sql", "chat": "/adapters/chat"}
    assert lora.is_on and lora.max_loaded == 2
    shown = tmp_path / "shown.toml"
    shown.write_text(config_as_toml(load_config(str(toml), environ={})))
    assert load_config(str(shown), environ={}).lora == lora


@pytest.mark.parametrize("adapters, named", [
    ('["sql=/a", "sql=/b"]', "sql given more than once"),
    ('["no-path"]', "'no-path' is not an adapter as NAME=PATH"),
    ("{ sql = 3 }", "must map names to path strings"),
])
def test_a_bad_lora_adapters_value_is_named(tmp_path, adapters, named):
    toml = tmp_path / "tercet.toml"
    toml.write_text(f"[lora]\nadapters = {adapters}\n")
    with pytest.raises(ConfigError, match=named):
        load_config(str(toml), environ={})
