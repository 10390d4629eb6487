"""entrypoints/deepfm_worker_watch.py: the parameter-server chief ends a run whose worker died (ClusterCoordinator
would wait up to an hour for it), on real loopback ports. The end-to-end case is in test_local_operations."""

import socket
import threading

import entry_support  # noqa: F401  puts entrypoints/ on sys.path

import deepfm_worker_watch as ww
from hetero_cluster import port_open


def listening():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server, f"127.0.0.1:{server.getsockname()[1]}"


def closed_address():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    return address


def test_a_worker_whose_port_closed_ends_the_chief_naming_it():
    alive, up = listening()
    down = closed_address()
    lost: list[str] = []
    done = threading.Event()
    watch = ww.WorkerWatch(
        [up, down], wait_s=0.3, poll_s=0.05, on_lost=lambda message: (lost.append(message), done.set())
    )
    watch.start()
    assert done.wait(30)
    watch.stop()
    alive.close()
    assert len(lost) == 1 and lost[0].startswith(f"error: worker task 1 ({down}) has been unreachable for")
    assert "$DFM_WORKER_WAIT_S" in lost[0]


def test_workers_that_answer_and_a_stopped_watch_end_nothing():
    alive, up = listening()
    probes = threading.Semaphore(0)

    def probe(address):
        answer = port_open(address)
        probes.release()
        return answer

    lost: list[str] = []
    watch = ww.WorkerWatch([up], wait_s=0.0, poll_s=0.01, on_lost=lost.append, probe=probe).start()
    for _ in range(20):  # twenty checks of a worker that answers
        assert probes.acquire(timeout=30)
    watch.stop()  # the chief's own shutdown: its workers may go now
    watch._thread.join(timeout=30)
    alive.close()
    assert lost == [] and not watch._thread.is_alive()


def test_the_wait_comes_from_the_environment():
    assert ww.wait_s({}) == ww.DEFAULT_WAIT_S
    assert ww.wait_s({ww.WAIT_ENV: "5"}) == 5.0
