"""Typed IPC: the messages on the wire, their registry and field checks, ZeroMQ channels, dispatch.

Also the endpoints (PortArgs, the private runtime directory) and the control plane's Communicator.
May import: the foundation modules (errors, sampling_params, containment). Never torch."""
