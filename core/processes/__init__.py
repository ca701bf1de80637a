"""The life of a tercet process: its context (config, plugins, serializer), a manager's I/O loop,
a child's start-up and ready report, the supervisor that starts, watches and stops children, titles.
May import: config, ipc, plugin_host and the foundation modules."""
