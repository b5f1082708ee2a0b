#!/usr/bin/env python3
"""KIP-1191 share-group dead-letter queue, with confluent-kafka 2.16's ShareConsumer.

  share_dlq.py --bootstrap H:P --topic T --dlq-topic dlq.T --group G [--count 30] [--partitions 2]
               [--limit 2] [--copy true|false]

Creates T (--partitions) and the DLQ topic (1 partition, errors.deadletterqueue.group.enable=true),
produces --count records (records.py), sets the group configs share.auto.offset.reset=earliest,
share.delivery.count.limit=--limit, errors.deadletterqueue.topic.name=--dlq-topic and
errors.deadletterqueue.copy.record.enable=--copy. One explicit consumer acknowledges record i:
i % 3 == 0 ACCEPT, == 1 RELEASE (always, until it is archived at the delivery limit), == 2 REJECT.
A plain consumer then reads the DLQ topic: it must hold exactly one record per REJECTed or
over-limit record, with Kafka's headers (__dlq.errors.topic, .partition, .offset, .group,
.delivery.count, .message, in that order, UTF-8 strings) and, with --copy true, the original key
and value (none with --copy false).
Prints one line "RESULT {json}" and exits 0 only if every check held.
"""

import argparse
import json
import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, AcknowledgeType, Consumer, KafkaError,
                             KafkaException, Producer, ShareConsumer, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

import records as R

REJECTED = "Offset rejected by client."
EXCEEDED = "Offset delivery count exceeded the threshold."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--dlq-topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--count", type=int, default=30)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("--copy", default="true")
    ap.add_argument("--timeout", type=float, default=90)
    a = ap.parse_args()
    errors = []
    out = {}

    def err(s):
        errors.append(s)
        R.log("CHECK FAILED:", s)

    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    topics = [NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1),
              NewTopic(a.dlq_topic, num_partitions=1, replication_factor=1,
                       config={"errors.deadletterqueue.group.enable": "true"})]
    for t, f in admin.create_topics(topics).items():
        try:
            f.result(timeout=60)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(a.count):
        p.produce(a.topic, value=R.value(i), key=R.key(i), partition=i % a.partitions)
    assert p.flush(60) == 0
    configs = {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": str(a.limit),
               "errors.deadletterqueue.topic.name": a.dlq_topic,
               "errors.deadletterqueue.copy.record.enable": a.copy}
    res = ConfigResource(ResourceType.GROUP, a.group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)

    # index -> (partition, offset); expected DLQ entries: (partition, offset) -> (count, message)
    where = {}
    expected = {}
    c = ShareConsumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([a.topic])
    deadline = time.time() + a.timeout
    last_new = None
    try:
        while time.time() < deadline and (last_new is None or time.time() - last_new < 5):
            ms = [m for m in c.poll(0.5) if not m.error()]
            for m in ms:
                i = m.offset() * a.partitions + m.partition()
                where[i] = (m.partition(), m.offset())
                kind = i % 3
                c.acknowledge(m, (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                                  AcknowledgeType.REJECT)[kind])
                if kind == 2:
                    expected[(m.partition(), m.offset())] = (m.delivery_count(), REJECTED)
                elif kind == 1 and m.delivery_count() >= a.limit:
                    expected[(m.partition(), m.offset())] = (m.delivery_count(), EXCEEDED)
                last_new = time.time()
            if ms:
                c.commit_sync(30)
    finally:
        c.close()
    out["consumed_distinct"] = len(where)
    if len(where) != a.count:
        err(f"share consumer saw {len(where)} distinct records, expected {a.count}")

    plain = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group + "-reader",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
    # assign, not subscribe: Lockstep has no classic consumer groups
    plain.assign([TopicPartition(a.dlq_topic, 0, OFFSET_BEGINNING)])
    got = {}
    samples = []
    deadline = time.time() + 60
    while time.time() < deadline and len(got) < len(expected):
        m = plain.poll(0.5)
        if m is None or m.error():
            continue
        h = [(k, v.decode() if v is not None else None) for k, v in (m.headers() or [])]
        if len(samples) < 3:
            samples.append({"key": m.key() and m.key().decode(errors="replace"),
                            "value_len": None if m.value() is None else len(m.value()),
                            "headers": h, "partition": m.partition()})
        hd = dict(h)
        try:
            src = (int(hd["__dlq.errors.partition"]), int(hd["__dlq.errors.offset"]))
        except (KeyError, ValueError):
            err(f"DLQ record without source headers: {h}")
            continue
        if src in got:
            err(f"DLQ record for {src} twice")
        got[src] = True
        names = [k for k, _ in h]
        if names != ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
                     "__dlq.errors.group", "__dlq.errors.delivery.count", "__dlq.errors.message"]:
            err(f"DLQ header names/order {names}")
        if hd.get("__dlq.errors.topic") != a.topic or hd.get("__dlq.errors.group") != a.group:
            err(f"DLQ topic/group headers {h}")
        if src in expected:
            count, message = expected[src]
            if hd.get("__dlq.errors.delivery.count") != str(count) or \
                    hd.get("__dlq.errors.message") != message:
                err(f"DLQ headers of {src}: {h}, expected count {count} message {message!r}")
        i = src[1] * a.partitions + src[0]
        if a.copy == "true":
            if (m.key(), m.value()) != (R.key(i), R.value(i)):
                err(f"DLQ record {src}: key/value differ from the original")
        elif m.key() is not None or m.value() is not None:
            err(f"DLQ record {src}: key/value present with copy disabled")
    time.sleep(1)
    while True:  # anything extra shows up now
        m = plain.poll(1.0)
        if m is None:
            break
        if not m.error():
            err(f"extra DLQ record at offset {m.offset()}: {m.headers()}")
    plain.close()
    out.update(expected=len(expected), dlq_records=len(got), samples=samples)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing:
        err(f"{len(missing)} archived records missing from the DLQ, e.g. {missing[:5]}")
    if extra:
        err(f"{len(extra)} unexpected DLQ records, e.g. {extra[:5]}")
    out.update(errors=errors, failures=len(errors), ok=not errors)
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
