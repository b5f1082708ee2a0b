"""librdkafka (confluent-kafka) client for tests/sasl.rs: one action per run, prints RESULT {json}.

usage: sasl_client.py '{"conf": {...librdkafka config...}, "action": "...", ...}'
actions:
  metadata        brokers as host:port (an authentication failure lands in "error")
  create          topic, partitions
  produce         topic, count (acks=all)
  consume         topic, partitions, count: reads from the start of each partition (assign())
  share_consume   topic, group, count: sets the group's share.auto.offset.reset=earliest, then one
                  ShareConsumer (implicit acknowledgement) reads until it has count records
  scram_upsert    user, mechanism (SCRAM-SHA-256|512), password, iterations
  scram_describe  users (list, or null for all): {user: [[mechanism, iterations], ...]}
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType, ScramMechanism, ScramCredentialInfo,
                                   UserScramCredentialUpsertion)

req = json.loads(sys.argv[1])
conf = dict(req["conf"])
action = req["action"]
out = {"action": action}
errors = []


def on_error(e):
    errors.append(f"{e.name()}: {e.str()}" if isinstance(e, KafkaError) else str(e))


conf["error_cb"] = on_error
try:
    if action == "metadata":
        admin = AdminClient(conf)
        try:
            md = admin.list_topics(timeout=req.get("timeout", 10))
            out["brokers"] = sorted(f"{b.host}:{b.port}" for b in md.brokers.values())
        finally:
            admin.poll(1)  # serves error_cb: an authentication failure arrives as an error event
    elif action == "create":
        admin = AdminClient(conf)
        fs = admin.create_topics(
            [NewTopic(req["topic"], num_partitions=req["partitions"], replication_factor=1)])
        for f in fs.values():
            f.result(timeout=30)
        out["created"] = True
    elif action == "produce":
        p = Producer(dict(conf, **{"linger.ms": 5, "acks": "all"}))
        failed = []
        for i in range(req["count"]):
            p.produce(req["topic"], value=f"v{i}".encode(), key=f"k{i}".encode(),
                      on_delivery=lambda e, m: failed.append(str(e)) if e else None)
            p.poll(0)
        left = p.flush(60)
        out["produced"] = req["count"] - left - len(failed)
        out["failed"] = failed[:3]
    elif action == "consume":
        c = Consumer(dict(conf, **{"group.id": "p18-sasl-unused", "enable.auto.commit": False,
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
    elif action == "share_consume":
        from confluent_kafka import ShareConsumer
        admin = AdminClient(conf)
        res = ConfigResource(ResourceType.GROUP, req["group"], incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=30)
        sc = ShareConsumer(dict(conf, **{"group.id": req["group"]}))
        sc.subscribe([req["topic"]])
        got = set()
        deadline = time.time() + 90
        while len(got) < req["count"] and time.time() < deadline:
            for m in sc.poll(1.0) or []:
                if m.error() is None:
                    got.add((m.partition(), m.offset()))
        sc.close()
        out["share_consumed"] = len(got)
    elif action == "scram_upsert":
        mech = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
                "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}[req["mechanism"]]
        up = UserScramCredentialUpsertion(req["user"], ScramCredentialInfo(mech, req["iterations"]),
                                          req["password"].encode())
        admin = AdminClient(conf)
        for f in admin.alter_user_scram_credentials([up]).values():
            f.result(timeout=30)
        out["upserted"] = True
    elif action == "scram_describe":
        admin = AdminClient(conf)
        fs = admin.describe_user_scram_credentials(req.get("users"))
        described = {}
        if isinstance(fs, dict):
            items = [(u, f.result(timeout=30)) for u, f in fs.items()]
        else:
            items = list(fs.result(timeout=30).items())
        for user, d in items:
            described[user] = sorted([str(i.mechanism).split(".")[-1], i.iterations]
                                     for i in d.scram_credential_infos)
        out["described"] = described
except KafkaException as e:  # noqa: BLE001 - the test asserts on the error
    err = e.args[0] if e.args else None
    out["error"] = str(e)
    if isinstance(err, KafkaError):
        out["code"] = err.name()
except Exception as e:  # noqa: BLE001
    out["error"] = str(e)
out["client_errors"] = errors[:5]
print("RESULT " + json.dumps(out), flush=True)
