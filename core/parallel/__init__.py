"""Spreading one model over processes: where each worker runs (topology), where TP groups meet
(rendezvous), joining a group, and the descriptions that ranks and nodes compare to agree.
May import: model (its collectives), processes, config and the foundation modules."""
