"""Serving over several hosts: node addresses, the node secret and the handshake that proves it,
each node's link to node 0, node 0's hub, and the launch of a node other than node 0 (its share
of the scheduler processes).
May import: scheduler (to run its workers), parallel, processes, ipc, formats, config, the foundation."""
