"""The request metrics of several API workers, summed at every scrape.

Each API worker observes the requests it serves. With ``server.api_workers > 1`` a
scrape may reach any worker, and must still show the whole server: the workers
keep their counters and histograms in ``prometheus_client``'s multi-process files
(one memory-mapped file per worker in a directory of the runtime directory), and
the scrape sums them over every worker, gone ones included, so a total never goes
back. The ranks' figures are not in those files: every worker receives every
rank's reports and publishes them once, as one worker does.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, values
from prometheus_client.multiprocess import MultiProcessCollector


def keep_metrics_in(directory: str) -> None:
    """From now on, in this process, metrics created keep their values in files in ``directory``."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # prometheus_client reads both when it creates a metric's file; it chose its value
    # class when first imported, before this process knew it was one of several.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    values.ValueClass = values.MultiProcessValue()


def summed_registry(directory: str) -> CollectorRegistry:
    """A registry whose scrape sums every worker's files in ``directory``."""
    registry = CollectorRegistry(auto_describe=True)
    MultiProcessCollector(registry, path=directory)
    return registry
