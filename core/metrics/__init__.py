"""What the processes measure: Prometheus serving metrics, fixed-bucket latency histograms,
and the stage timer that logs where a process's time goes.
May import: the foundation modules only."""
