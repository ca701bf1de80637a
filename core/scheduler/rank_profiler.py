"""One rank's torch profiler, started and stopped by control requests (``POST /start_profile``).

A recording runs ``torch.profiler`` over the rank's own process while it keeps serving. It ends
when ``/stop_profile`` asks, or by itself once the rank has run ``num_steps`` model steps; either
way the trace is written then, in Chrome's trace format (``chrome://tracing``, Perfetto), as one
file per rank: ``dp<rank>.trace.json`` (``dp<rank>-tp<k>.trace.json`` for each process of a
tensor-parallel group) in the directory the API process chose and checked inside
``[server] profile_dir``. The rank checks that directory again against its own root, so that a
forged control message cannot make it write anywhere else.

Writing the trace happens on the rank's loop, between steps: requests wait for it (a few
milliseconds for a short recording, longer for a long one).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tercet.errors import RequestError

logger = logging.getLogger(__name__)
ACTIVITY_NAMES = ("CPU", "CUDA")


@dataclass
class Recording:
    """A profile being recorded: its torch profiler, where it goes, and how many steps it may see."""

    profiler: object
    path: str
    # Steps after which it ends by itself; None: until /stop_profile.
    num_steps: int | None
    num_steps_done: int = 0


class RankProfiler:
    """Records at most one profile at a time; ``root`` is ``[server] profile_dir``, resolved."""

    def __init__(self, root: str, trace_name: str, on_cuda: bool = False):
        self.root = root
        self.trace_name = trace_name
        # Whether the rank's model runs on a GPU: CUDA is then recorded unless the request says otherwise.
        self.on_cuda = on_cuda
        self.recording: Recording | None = None
        # The trace a recording that ended by itself wrote, until /stop_profile collects it.
        self.written: dict | None = None

    def start(self, output_dir: str, activities: list[str] | None, num_steps: int | None) -> dict:
        if self.recording is not None:
            raise RequestError("a profile is already being recorded; POST /stop_profile first",
                               "output_dir", status_code=409)
        directory = self._checked_directory(output_dir)
        profiler = _torch_profiler(self._activities(activities))
        profiler.start()
        self.written = None
        self.recording = Recording(profiler, os.path.join(directory, f"{self.trace_name}.trace.json"), num_steps)
        logger.info("profiling into %s%s", self.recording.path,
                    f" for {num_steps} steps" if num_steps is not None else "")
        return {"recording": True, "path": self.recording.path}

    def after_step(self) -> None:
        """One model step ran: a recording that has seen its ``num_steps`` ends now."""
        recording = self.recording
        if recording is None:
            return
        recording.num_steps_done += 1
        recording.profiler.step()
        if recording.num_steps is not None and recording.num_steps_done >= recording.num_steps:
            self.written = self._write()

    def status(self) -> dict:
        if self.recording is not None:
            return {"recording": True, "num_steps_done": self.recording.num_steps_done, "path": None}
        written = self.written or {}
        return {"recording": False, "num_steps_done": written.get("num_steps", 0), "path": written.get("path")}

    def stop(self) -> dict:
        """End the recording and write its trace (or give the trace one that ended by itself wrote)."""
        if self.recording is not None:
            return self._write()
        if self.written is not None:
            written, self.written = self.written, None
            return written
        raise RequestError("no profile is being recorded; POST /start_profile first", status_code=409)

    def _write(self) -> dict:
        recording, self.recording = self.recording, None
        recording.profiler.stop()
        recording.profiler.export_chrome_trace(recording.path)
        logger.info("profile of %d steps written to %s", recording.num_steps_done, recording.path)
        return {"path": recording.path, "num_steps": recording.num_steps_done}

    def _checked_directory(self, output_dir: str) -> str:
        """``output_dir``, resolved, once it is sure to lie inside the root; made if missing (a rank
        on another node has no directory the API process made)."""
        root = os.path.realpath(self.root)
        resolved = os.path.realpath(output_dir)
        if not os.path.isabs(output_dir) or not Path(resolved).is_relative_to(root):
            raise RequestError("output_dir is not a directory inside [server] profile_dir", "output_dir")
        try:
            os.makedirs(resolved, exist_ok=True)
        except OSError as error:
            raise RequestError(f"output_dir cannot be made: {error.strerror}", "output_dir") from None
        return resolved

    def _activities(self, activities: list[str] | None) -> list[str]:
        if activities is None:
            return ["CPU", "CUDA"] if self.on_cuda else ["CPU"]
        unknown = [name for name in activities if name not in ACTIVITY_NAMES]
        if unknown or not activities:
            raise RequestError(f"activities must be some of {list(ACTIVITY_NAMES)}", "activities")
        if "CUDA" in activities and not _cuda_is_available():
            raise RequestError("activities: CUDA cannot be recorded here: this rank has no CUDA device",
                               "activities")
        return list(activities)


def _cuda_is_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _torch_profiler(activities: list[str]):
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[getattr(ProfilerActivity, name) for name in activities])
