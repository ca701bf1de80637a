from tercet.ipc.control_messages import ControlReply
from tercet.ipc.messages import BatchEmbeddingOutput
from tercet.ipc.result_routes import ApiWorker, ResultRoutes, owner_of, rows_by_owner


class Recorder:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def routes(num_workers: int) -> ResultRoutes:
    return ResultRoutes(lambda endpoint: Recorder(), [f"ipc://w{number}" for number in range(num_workers)])


def test_one_worker_leaves_ids_as_they_are():
    worker = ApiWorker()
    assert worker.tag("abc") == "abc" == worker.untag("abc")
    assert worker.others() == []
    assert owner_of("w2:abc", 1) == 0


def test_a_worker_tags_its_ids_and_reads_them_back():
    worker = ApiWorker(2, 3)
    assert worker.title == "tercet api worker 2"
    assert worker.tag("abc#1") == "w2:abc#1"
    assert worker.untag("w2:abc#1") == "abc#1"
    # A client's own id that looks like another worker's tag stays the client's.
    assert worker.untag(worker.tag("w1:x")) == "w1:x"
    assert owner_of(worker.tag("w1:x"), 3) == 1
    assert [other.number for other in worker.others()] == [1, 3]


def test_an_id_without_a_known_tag_belongs_to_worker_1():
    assert owner_of("abc", 2) == 0
    assert owner_of("w9:abc", 2) == 0
    assert owner_of("w0:abc", 2) == 0


def test_a_batch_is_split_between_the_workers_owning_its_rows():
    batch = BatchEmbeddingOutput(["w2:a", "w1:b", "w2:c"], [b"1", b"2", b"3"], [1, 2, 3], [None, None, None])
    assert rows_by_owner(batch.rids, 2) == {1: [0, 2], 0: [1]}
    two = routes(2)
    two.send_batch(batch)
    assert two.senders[0].sent == [BatchEmbeddingOutput(["w1:b"], [b"2"], [2], [None])]
    assert two.senders[1].sent == [BatchEmbeddingOutput(["w2:a", "w2:c"], [b"1", b"3"], [1, 3], [None, None])]
    one = routes(1)
    one.send_batch(batch)
    assert one.senders[0].sent == [batch]


def test_a_reply_goes_to_the_asker_and_a_report_to_all():
    three = routes(3)
    three.send_reply(ControlReply("w3:xyz", 0, True))
    three.send_to_all("report")
    assert [sender.sent for sender in three.senders] == [["report"], ["report"], [ControlReply("w3:xyz", 0, True), "report"]]
