"""librdkafka (confluent-kafka) client for tests/security.rs: one action per run, prints RESULT {json}.

usage: security_client.py '{"conf": {...librdkafka config...}, "action": "...", ...}'
actions: metadata (brokers as host:port), create (topic, partitions), produce (topic, count),
consume (topic, partitions, count: reads from the start of each partition by assign()).
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

req = json.loads(sys.argv[1])
conf = req["conf"]
action = req["action"]
out = {"action": action}
try:
    if action == "metadata":
        md = AdminClient(conf).list_topics(timeout=15)
        out["brokers"] = sorted(f"{b.host}:{b.port}" for b in md.brokers.values())
    elif action == "create":
        admin = AdminClient(conf)
        fs = admin.create_topics(
            [NewTopic(req["topic"], num_partitions=req["partitions"], replication_factor=1)]
        )
        for f in fs.values():
            f.result(timeout=30)
        out["created"] = True
    elif action == "produce":
        p = Producer(dict(conf, **{"linger.ms": 5}))
        errors = []
        for i in range(req["count"]):
            p.produce(req["topic"], value=f"v{i}".encode(), key=f"k{i}".encode(),
                      on_delivery=lambda e, m: errors.append(str(e)) if e else None)
            p.poll(0)
        left = p.flush(60)
        out["produced"] = req["count"] - left - len(errors)
        out["errors"] = errors[:3]
    elif action == "consume":
        c = Consumer(dict(conf, **{"group.id": "p18-unused", "enable.auto.commit": False,
                                    "auto.offset.reset": "earliest"}))
        c.assign([TopicPartition(req["topic"], p, 0) for p in range(req["partitions"])])
        got = 0
        deadline = time.time() + 60
        while got < req["count"] and time.time() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got += 1
        c.close()
        out["consumed"] = got
except Exception as e:  # noqa: BLE001 - the test asserts on the error text
    out["error"] = str(e)
print("RESULT " + json.dumps(out), flush=True)
