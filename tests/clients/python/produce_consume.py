#!/usr/bin/env python3
"""confluent-kafka (librdkafka) produce + read-back by partition assignment.

  produce_consume.py --bootstrap H:P --topic T [--partitions 4] [--count 100000] [--mode both|produce|verify]
                     [--compression none|gzip|snappy|lz4|zstd] [--base-ts MS] [--debug protocol]

produce: creates the topic (AdminClient CreateTopics), produces --count records (records.py) with
         acks=all and enable.idempotence=true, each to partition i % partitions with timestamp
         base_ts + i (--base-ts, default now); every delivery report must succeed, and record j of partition p must get offset j.
verify:  assigns every partition from the beginning (no consumer group), reads until each partition
         has its expected number of records, and checks offset, key, value, headers and timestamp
         byte-exact (--mode verify needs the --base-ts that the produce run used: its RESULT has it);
         also checks ListOffsets earliest = 0 and latest = expected count.
Prints one line "RESULT {json}" and exits 0 only if everything matched.
"""

import argparse
import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError,
                             KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

import records as R


def base_conf(a):
    c = {"bootstrap.servers": a.bootstrap, "client.id": "lockstep-interop-py",
         "broker.address.family": "v4"}
    if a.debug:
        c["debug"] = a.debug
    return c


def create_topic(a):
    admin = AdminClient(base_conf(a))
    futs = admin.create_topics([NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1)],
                               operation_timeout=30, request_timeout=30)
    try:
        futs[a.topic].result(timeout=60)
        R.log(f"created topic {a.topic} with {a.partitions} partitions")
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        R.log(f"topic {a.topic} already exists")
    # wait until metadata shows every partition with a leader
    deadline = time.time() + 30
    while True:
        md = admin.list_topics(topic=a.topic, timeout=10)
        t = md.topics.get(a.topic)
        if t and not t.error and len(t.partitions) == a.partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        if time.time() > deadline:
            raise RuntimeError(f"topic {a.topic} not ready in metadata: {t and t.error}")
        time.sleep(0.2)


def produce(a, out):
    conf = base_conf(a)
    conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                 "compression.type": a.compression, "message.timeout.ms": 120000,
                 "queue.buffering.max.messages": 200000})
    p = Producer(conf)
    errors = []
    offsets_bad = []
    acked = [0]

    def on_delivery(err, msg, i):
        if err is not None:
            errors.append(f"record {i}: {err}")
            return
        acked[0] += 1
        if msg.partition() != i % a.partitions or msg.offset() != i // a.partitions:
            offsets_bad.append((i, msg.partition(), msg.offset()))

    t0 = time.time()
    for i in range(a.count):
        while True:
            try:
                p.produce(a.topic, value=R.value(i), key=R.key(i), headers=R.headers(i) or None,
                          partition=i % a.partitions, timestamp=R.timestamp(i),
                          on_delivery=lambda err, msg, i=i: on_delivery(err, msg, i))
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    remaining = p.flush(120)
    dt = time.time() - t0
    out.update(produced=a.count, acked=acked[0], produce_errors=len(errors), unflushed=remaining,
               bad_offsets=len(offsets_bad), produce_seconds=round(dt, 2))
    for e in errors[:10]:
        R.log("delivery error:", e)
    for b in offsets_bad[:10]:
        R.log("unexpected partition/offset (record, partition, offset):", b)
    return not errors and not offsets_bad and remaining == 0 and acked[0] == a.count


def expected_per_partition(a):
    return [len(range(p, a.count, a.partitions)) for p in range(a.partitions)]


def verify(a, out):
    conf = base_conf(a)
    # Python's Consumer insists on a group.id; with assign() from OFFSET_BEGINNING and no commits it
    # is only used to look up the coordinator (FindCoordinator), no group membership or offsets
    conf.update({"group.id": "lockstep-interop-assign-" + a.topic, "enable.auto.commit": False, "auto.offset.reset": "error",
                 "fetch.max.bytes": 8 * 1024 * 1024, "enable.partition.eof": False})
    c = Consumer(conf)
    exp = expected_per_partition(a)
    ok = True
    # ListOffsets earliest/latest
    for p in range(a.partitions):
        lo, hi = c.get_watermark_offsets(TopicPartition(a.topic, p), timeout=30, cached=False)
        if lo != 0 or hi != exp[p]:
            R.log(f"partition {p}: watermarks ({lo}, {hi}), expected (0, {exp[p]})")
            ok = False
    c.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in range(a.partitions)])
    nxt = [0] * a.partitions  # next expected offset per partition
    mismatches = []
    consumed = 0
    t0 = time.time()
    deadline = t0 + a.timeout
    while any(nxt[p] < exp[p] for p in range(a.partitions)) and time.time() < deadline:
        for m in c.consume(num_messages=10000, timeout=1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                R.log("consume error:", m.error())
                mismatches.append(f"error {m.error()}")
                continue
            p, off = m.partition(), m.offset()
            consumed += 1
            if off != nxt[p]:
                mismatches.append(f"p{p}: offset {off}, expected {nxt[p]}")
                nxt[p] = max(nxt[p], off + 1)
                continue
            nxt[p] = off + 1
            i = off * a.partitions + p
            if i >= a.count:
                mismatches.append(f"p{p}: unexpected extra record at offset {off}")
                continue
            want_h = R.headers(i) or None
            got = (m.key(), m.value(), m.headers(), m.timestamp())
            want = (R.key(i), R.value(i), want_h, (TIMESTAMP_CREATE_TIME, R.timestamp(i)))
            if got != want:
                mismatches.append(f"record {i} (p{p} o{off}): got {got!r:.300} want {want!r:.300}")
    dt = time.time() - t0
    c.close()
    short = {p: (nxt[p], exp[p]) for p in range(a.partitions) if nxt[p] != exp[p]}
    for mm in mismatches[:10]:
        R.log("MISMATCH", mm)
    if short:
        R.log("partitions not fully read (got, expected):", short)
    out.update(consumed=consumed, expected=a.count, mismatches=len(mismatches),
               short_partitions=len(short), consume_seconds=round(dt, 2))
    return ok and not mismatches and not short and consumed == a.count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--count", type=int, default=100000)
    ap.add_argument("--mode", choices=["both", "produce", "verify"], default="both")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--base-ts", type=int, default=None)
    ap.add_argument("--debug", default="")
    a = ap.parse_args()
    R.base_ts = a.base_ts
    if R.base_ts is None:
        if a.mode == "verify":
            ap.error("--mode verify needs --base-ts (printed in the produce run's RESULT)")
        R.base_ts = R.now_ms()
    import confluent_kafka
    out = {"client": "confluent-kafka " + confluent_kafka.__version__,
           "librdkafka": confluent_kafka.libversion()[0], "mode": a.mode, "topic": a.topic,
           "base_ts": R.base_ts, "partitions": a.partitions}
    ok = True
    try:
        if a.mode in ("both", "produce"):
            create_topic(a)
            ok &= produce(a, out)
        if a.mode in ("both", "verify"):
            ok &= verify(a, out)
    except Exception as e:  # report, never hang
        R.log("exception:", repr(e))
        out["exception"] = repr(e)
        ok = False
    out["ok"] = bool(ok)
    R.result(out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
