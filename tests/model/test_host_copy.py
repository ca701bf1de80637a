"""The output read-back: plain on a CPU; on CUDA into pinned memory, without blocking, then one wait."""

import torch

from tercet.model import host_copy


def test_a_cpu_tensor_is_read_as_it_is():
    tensor = torch.tensor([3, 1, 4])
    assert host_copy.copy_to_host(tensor) is tensor
    assert host_copy.read_back(tensor) == [3, 1, 4]


class CudaStandIn:
    """A tensor that says it lives on CUDA (the test machine has none)."""

    def __init__(self, values):
        self.values = torch.tensor(values)
        self.device = torch.device("cuda")
        self.shape, self.dtype = self.values.shape, self.values.dtype


class RecordingHostBuffer:
    def __init__(self, events, shape, dtype):
        self.events, self.data = events, torch.empty(shape, dtype=dtype)

    def copy_(self, source, non_blocking=False):
        self.events.append(("copy", non_blocking))
        self.data.copy_(source.values)

    def tolist(self):
        self.events.append(("read",))
        return self.data.tolist()


def test_a_cuda_tensor_lands_in_pinned_memory_without_blocking_then_waits_once_before_it_is_read():
    events = []

    def allocate(shape, dtype, pin_memory):
        events.append(("allocate", pin_memory))
        return RecordingHostBuffer(events, shape, dtype)

    host = host_copy.pinned_copy(CudaStandIn([[2.0, -0.5]]), allocate, wait=lambda: events.append(("wait",)))
    assert host.tolist() == [[2.0, -0.5]]
    assert events == [("allocate", True), ("copy", True), ("wait",), ("read",)]


def test_copy_to_host_takes_the_pinned_path_for_cuda_only(monkeypatch):
    taken = []
    monkeypatch.setattr(host_copy, "pinned_copy", lambda tensor, allocate, wait: taken.append(tensor) or "pinned")
    monkeypatch.setattr(host_copy.torch.cuda, "current_stream", lambda device: type("Stream", (), {"synchronize": None}))
    on_cuda = CudaStandIn([1])
    assert host_copy.copy_to_host(on_cuda) == "pinned" and taken == [on_cuda]
    host_copy.copy_to_host(torch.tensor([1]))
    assert taken == [on_cuda]
