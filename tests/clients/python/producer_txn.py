#!/usr/bin/env python3
"""Producer transactions with confluent-kafka 2.16 (librdkafka), for tests/producer_txn_interop.rs.

  producer_txn.py --bootstrap H:P --prefix P SCENARIO [SCENARIO...] [--txn-timeout-ms 2000]

Scenarios (each uses its own topics, groups and transactional ids, named with --prefix):
  abort_commit  a transaction of 10 records is aborted, the next one of 10 committed; an open
                transaction (5 records, flushed) holds back the read_committed consumer (LSO) until
                it commits. read_committed sees the committed records exactly once and none of the
                aborted; read_uncommitted sees all of them; the control records take one offset each.
  offsets       read-process-write with send_offsets_to_transaction: a group member reads 6 records
                of the input; its offsets are sent in a transaction that is aborted (no committed
                offset afterwards), then in one that commits (offset 6 committed with the writes);
                while the transaction is open a read_uncommitted OffsetFetch sees the old offset and a
                read_committed one (require_stable) does not get an answer.
  fence         producer A has a transaction open when producer B initialises the same
                transactional.id: A's transaction is aborted, A's commit fails fatally (fenced), B
                commits; read_committed sees only B's records.
  timeout       a producer with transaction.timeout.ms=--txn-timeout-ms leaves a transaction open:
                the coordinator aborts it (the LSO passes its records and its abort marker), its
                records are never visible to read_committed, the producer's commit then fails.

Prints one line "RESULT {json}": {"errors": [...], SCENARIO: {observations}}; exits 0 only if every
check held.
"""

import argparse
import json
import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

ERRORS = []
T0 = time.time()


def log(*a):
    print("[%6.2f]" % (time.time() - T0), *a, file=sys.stderr, flush=True)


def check(cond, what):
    if not cond:
        ERRORS.append(what)
        log("CHECK FAILED:", what)


def create_topics(bootstrap, names, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1)
                              for n in names])
    for f in fs.values():
        try:
            f.result(timeout=60)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def txn_producer(bootstrap, txn_id, **extra):
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(60)
    return p


def error_kind(e):
    """What a client sees of a failed call: librdkafka's error name and flags."""
    k = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
    if k is None:
        return {"name": type(e).__name__, "str": str(e)}
    return {"name": k.name(), "fatal": k.fatal(), "retriable": k.retriable(),
            "txn_requires_abort": k.txn_requires_abort(), "str": k.str()}


def read_all(bootstrap, topic, partitions, isolation, timeout=30):
    """Every record of the topic from the beginning up to the end the isolation level allows:
    {partition: [(offset, value)]}."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-" + topic,
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": isolation, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = {p: [] for p in range(partitions)}
    eof = set()
    deadline = time.time() + timeout
    while len(eof) < partitions:
        if time.time() > deadline:
            check(False, "%s: %s read did not reach the end of every partition in %ss (eof %s)"
                  % (topic, isolation, timeout, sorted(eof)))
            break
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            else:
                check(False, "%s: consumer error %s" % (topic, m.error()))
            continue
        eof.discard(m.partition())
        got[m.partition()].append((m.offset(), m.value().decode()))
    c.close()
    return got


def watermarks(bootstrap, topic, partitions, isolation):
    """(low, high) per partition from ListOffsets at the isolation level (high = LSO for
    read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-wm-" + topic,
                  "isolation.level": isolation})
    w = [list(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False))
         for p in range(partitions)]
    c.close()
    return w


def values(got):
    return [v for p in sorted(got) for _, v in got[p]]


def scenario_abort_commit(a):
    topic = a.prefix + "-ac"
    create_topics(a.bootstrap, [topic], 2)
    p = txn_producer(a.bootstrap, a.prefix + "-ac-txn")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"aborted-%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=b"committed-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    # An open transaction: flushed (written to the log) but not committed.
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"open-%d" % i, partition=i % 2)
    p.flush(30)
    rc_open = read_all(a.bootstrap, topic, 2, "read_committed")
    ru_open = read_all(a.bootstrap, topic, 2, "read_uncommitted")
    wm_rc_open = watermarks(a.bootstrap, topic, 2, "read_committed")
    wm_ru_open = watermarks(a.bootstrap, topic, 2, "read_uncommitted")
    p.commit_transaction(30)
    rc = read_all(a.bootstrap, topic, 2, "read_committed")
    ru = read_all(a.bootstrap, topic, 2, "read_uncommitted")
    wm_rc = watermarks(a.bootstrap, topic, 2, "read_committed")
    wm_ru = watermarks(a.bootstrap, topic, 2, "read_uncommitted")

    committed = sorted("committed-%d" % i for i in range(10))
    opened = sorted("open-%d" % i for i in range(5))
    aborted = sorted("aborted-%d" % i for i in range(10))
    check(sorted(values(rc_open)) == committed,
          "read_committed with a transaction open: %s" % values(rc_open))
    check(sorted(values(ru_open)) == sorted(aborted + committed + opened),
          "read_uncommitted with a transaction open: %s" % values(ru_open))
    check(sorted(values(rc)) == sorted(committed + opened),
          "read_committed after commit (each committed record once, no aborted one): %s"
          % values(rc))
    check(sorted(values(ru)) == sorted(aborted + committed + opened),
          "read_uncommitted sees every record: %s" % values(ru))
    # Per partition: 5 aborted + marker, 5 committed + marker, then 2 or 3 open + marker.
    check(wm_ru == [[0, 16], [0, 15]] and wm_rc == wm_ru,
          "high watermarks after the commit: %s, LSO %s" % (wm_ru, wm_rc))
    # With the third transaction open the LSO is its first offset (12 on both partitions).
    check(wm_rc_open == [[0, 12], [0, 12]], "LSO with a transaction open: %s" % wm_rc_open)
    check(wm_ru_open == [[0, 15], [0, 14]], "HW with a transaction open: %s" % wm_ru_open)
    for part in (0, 1):
        offs = [o for o, _ in ru[part]]
        check(offs == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10] + ([12, 13, 14] if part == 0 else [12, 13]),
              "partition %d offsets (control records take offsets 5, 11 and the last): %s"
              % (part, offs))
        order = [v for _, v in rc[part]]
        want = ["committed-%d" % i for i in range(part, 10, 2)] + \
            ["open-%d" % i for i in range(part, 5, 2)]
        check(order == want, "partition %d read_committed in order: %s" % (part, order))
    p.flush(5)
    return {"read_committed_open": values(rc_open), "read_committed": values(rc),
            "read_uncommitted": len(values(ru)), "watermarks_open": wm_ru_open,
            "lso_open": wm_rc_open, "watermarks": wm_ru, "lso": wm_rc}


def group_consumer(bootstrap, group, isolation="read_committed", **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": isolation,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


def committed_offsets(bootstrap, group, topic, isolation, timeout=10):
    c = group_consumer(bootstrap, group, isolation)
    try:
        got = c.committed([TopicPartition(topic, 0)], timeout=timeout)
        return got[0].offset
    except KafkaException as e:
        return error_kind(e)
    finally:
        c.close()


def scenario_offsets(a):
    src, dst = a.prefix + "-in", a.prefix + "-out"
    group = a.prefix + "-rpw"
    create_topics(a.bootstrap, [src, dst], 1)
    plain = Producer({"bootstrap.servers": a.bootstrap, "acks": "all"})
    for i in range(10):
        plain.produce(src, value=b"in-%d" % i, partition=0)
    check(plain.flush(30) == 0, "plain produce")
    c = group_consumer(a.bootstrap, group)
    c.subscribe([src])
    msgs = []
    deadline = time.time() + 30
    while len(msgs) < 6 and time.time() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            msgs.append(m)
    check(len(msgs) == 6, "consumed 6 input records: %d" % len(msgs))
    msgs = msgs[:6]
    check([m.value().decode() for m in msgs] == ["in-%d" % i for i in range(6)],
          "input order: %s" % [m.value() for m in msgs])
    offsets = [TopicPartition(src, 0, msgs[-1].offset() + 1)]
    p = txn_producer(a.bootstrap, a.prefix + "-rpw-txn")

    # 1: aborted, the offsets go with it.
    p.begin_transaction()
    for m in msgs:
        p.produce(dst, value=b"out-" + m.value(), partition=0)
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    after_abort = committed_offsets(a.bootstrap, group, src, "read_uncommitted")
    check(after_abort == -1001, "no committed offset after the abort: %s" % after_abort)

    # 2: committed; while it is open the offset is pending.
    p.begin_transaction()
    for m in msgs:
        p.produce(dst, value=b"out-" + m.value(), partition=0)
    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 30)
    p.flush(30)
    pending_ru = committed_offsets(a.bootstrap, group, src, "read_uncommitted")
    pending_rc = committed_offsets(a.bootstrap, group, src, "read_committed", timeout=3)
    check(pending_ru == -1001, "a read_uncommitted OffsetFetch while the transaction is open: %s"
          % pending_ru)
    check(isinstance(pending_rc, dict),
          "a read_committed (require_stable) OffsetFetch while the transaction is open gets no "
          "offset: %s" % pending_rc)
    p.commit_transaction(30)
    after_commit = committed_offsets(a.bootstrap, group, src, "read_committed")
    check(after_commit == 6, "offset 6 committed with the writes: %s" % after_commit)
    c.close()

    # A new member of the group resumes at offset 6.
    c2 = group_consumer(a.bootstrap, group)
    c2.subscribe([src])
    rest = []
    deadline = time.time() + 30
    while len(rest) < 4 and time.time() < deadline:
        m = c2.poll(0.2)
        if m is not None and not m.error():
            rest.append((m.offset(), m.value().decode()))
    c2.close()
    check(rest == [(i, "in-%d" % i) for i in range(6, 10)],
          "a new member resumes at the committed offset: %s" % rest)
    out = read_all(a.bootstrap, dst, 1, "read_committed")
    check(values(out) == ["out-in-%d" % i for i in range(6)],
          "output read_committed exactly once: %s" % values(out))
    return {"after_abort": after_abort, "pending_read_uncommitted": pending_ru,
            "pending_read_committed": pending_rc, "after_commit": after_commit,
            "resumed": [o for o, _ in rest], "output": values(out)}


def scenario_fence(a):
    topic = a.prefix + "-fence"
    create_topics(a.bootstrap, [topic], 1)
    tid = a.prefix + "-fence-txn"
    pa = txn_producer(a.bootstrap, tid)
    pa.begin_transaction()
    for i in range(3):
        pa.produce(topic, value=b"zombie-%d" % i, partition=0)
    pa.flush(30)
    pb = txn_producer(a.bootstrap, tid)  # fences A, aborts its transaction
    pb.begin_transaction()
    for i in range(3):
        pb.produce(topic, value=b"winner-%d" % i, partition=0)
    pb.flush(30)
    # The zombie tries to go on: its produce is refused (old epoch), which is fatal to it.
    # (confluent-kafka raises the fatal error out of flush(), chained, as a SystemError.)
    zombie_produce = None
    try:
        pa.produce(topic, value=b"zombie-late", partition=0)
        pa.flush(10)
    except Exception as e:  # noqa: BLE001
        cause = e.__cause__ if isinstance(e.__cause__, KafkaException) else e
        zombie_produce = error_kind(cause)
    commit_error = None
    try:
        pa.commit_transaction(30)
    except KafkaException as e:
        commit_error = error_kind(e)
    check(commit_error is not None and commit_error.get("fatal") is True
          and commit_error.get("name") == "_FENCED",
          "the fenced producer's commit fails fatally as fenced: %s" % commit_error)
    pb.commit_transaction(30)
    got = read_all(a.bootstrap, topic, 1, "read_committed")
    check(values(got) == ["winner-%d" % i for i in range(3)],
          "read_committed sees only the new producer's records: %s" % values(got))
    return {"zombie_produce": zombie_produce, 
            "zombie_commit": commit_error, "read_committed": values(got)}


def scenario_timeout(a):
    topic = a.prefix + "-timeout"
    create_topics(a.bootstrap, [topic], 1)
    p = txn_producer(a.bootstrap, a.prefix + "-timeout-txn",
                     **{"transaction.timeout.ms": a.txn_timeout_ms})
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=b"forgotten-%d" % i, partition=0)
    p.flush(30)
    t_open = time.time()
    lso = watermarks(a.bootstrap, topic, 1, "read_committed")
    check(lso == [[0, 0]], "LSO while the transaction is open: %s" % lso)
    aborted_after = None
    deadline = t_open + a.wait_abort_s
    while time.time() < deadline:
        lso = watermarks(a.bootstrap, topic, 1, "read_committed")
        if lso[0][1] > 0:
            aborted_after = time.time() - t_open
            break
        time.sleep(0.25)
    check(aborted_after is not None, "the coordinator aborted the timed-out transaction within "
          "%ss (LSO %s)" % (a.wait_abort_s, lso))
    hw = watermarks(a.bootstrap, topic, 1, "read_uncommitted")
    check(lso == hw and hw == [[0, 5]], "after the abort LSO %s = HW %s = 5 (4 records + marker)"
          % (lso, hw))
    got = read_all(a.bootstrap, topic, 1, "read_committed")
    check(values(got) == [], "nothing of the timed-out transaction is visible: %s" % values(got))
    commit_error = None
    try:
        p.commit_transaction(30)
    except KafkaException as e:
        commit_error = error_kind(e)
    check(commit_error is not None, "the timed-out producer's commit fails")
    abort_error = None
    recovered = None
    if commit_error is not None and commit_error.get("txn_requires_abort"):
        try:
            p.abort_transaction(30)
            p.begin_transaction()
            p.produce(topic, value=b"after-timeout", partition=0)
            p.commit_transaction(30)
            recovered = values(read_all(a.bootstrap, topic, 1, "read_committed"))
            check(recovered == ["after-timeout"], "the producer goes on after the abort: %s"
                  % recovered)
        except KafkaException as e:
            abort_error = error_kind(e)
            check(False, "abort after a timed-out transaction: %s" % abort_error)
    return {"aborted_after_s": round(aborted_after or -1, 1), "lso": lso,
            "commit_error": commit_error, "abort_error": abort_error, "recovered": recovered}


SCENARIOS = {"abort_commit": scenario_abort_commit, "offsets": scenario_offsets,
             "fence": scenario_fence, "timeout": scenario_timeout}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--txn-timeout-ms", type=int, default=2000)
    ap.add_argument("--wait-abort-s", type=float, default=40)
    ap.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    out = {}
    for s in a.scenarios:
        t = time.time()
        log("scenario", s)
        try:
            out[s] = SCENARIOS[s](a)
        except KafkaException as e:
            check(False, "%s: unexpected %s" % (s, error_kind(e)))
        log("scenario", s, "done in %.1fs" % (time.time() - t))
    out["errors"] = ERRORS
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(1 if ERRORS else 0)


if __name__ == "__main__":
    main()
