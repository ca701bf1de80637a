import os
import stat

from tercet.config import IpcConfig
from tercet.ipc.port_args import PortArgs
from tercet.plugins.ipc_transport import IpcTransport
from tercet.plugins.tcp_transport import TcpTransport


def test_ipc_endpoints_live_in_a_private_directory():
    port_args = PortArgs.create(IpcTransport(IpcConfig()))
    try:
        mode = stat.S_IMODE(os.stat(port_args.runtime_dir).st_mode)
        assert mode == 0o700
        endpoints = {port_args.scheduler_input, port_args.detokenizer_input, port_args.tokenizer_input}
        assert len(endpoints) == 3
        for endpoint in endpoints:
            assert endpoint.startswith(f"ipc://{port_args.runtime_dir}/")
    finally:
        port_args.remove_runtime_dir()
    assert not os.path.exists(port_args.runtime_dir)


def test_tcp_endpoints_are_distinct_loopback_ports():
    port_args = PortArgs.create(TcpTransport(IpcConfig()))
    try:
        endpoints = [port_args.scheduler_input, port_args.detokenizer_input, port_args.tokenizer_input]
        assert all(e.startswith("tcp://127.0.0.1:") for e in endpoints)
        assert len(set(endpoints)) == 3
    finally:
        port_args.remove_runtime_dir()


def test_each_api_worker_has_its_own_result_endpoint():
    port_args = PortArgs.create(IpcTransport(IpcConfig()), api_workers=3)
    try:
        assert len(set(port_args.tokenizer_inputs)) == 3
        # Worker 1's is the endpoint a single API process has always had.
        assert port_args.tokenizer_input == port_args.tokenizer_inputs[0]
        assert port_args.tokenizer_input.endswith("/tokenizer")
        assert port_args.shared_metrics_dir.startswith(port_args.runtime_dir)
    finally:
        port_args.remove_runtime_dir()
