"""librdkafka (confluent-kafka) client for tests/acl.rs: one action per run, prints RESULT {json}.

usage: acl_client.py '{"conf": {...librdkafka config...}, "action": "...", ...}'
actions:
  create        topic, partitions (an existing topic is fine)
  group_config  group: sets share.auto.offset.reset=earliest (IncrementalAlterConfigs)
  produce       topic, count: {"produced": n, "errors": [error names]}
  consume       topic, partitions, count: assign() from offset 0; {"consumed": n, "errors": [...]}
  share         topic, group, count: ShareConsumer (implicit acks) until count records or 20 s;
                {"consumed": n, "errors": [...]}
  describe      topic, group: the authorized operations (KIP-430) of the cluster
                (DescribeCluster), the topic (Metadata) and the group (DescribeGroups):
                {"cluster": [names] | null, "topic": ..., "group": ...}, sorted operation names,
                null when the broker sent none (INT32_MIN); "NAME_error" if a describe failed
Errors are Kafka error names (KafkaError.name()), so the test asserts on e.g.
TOPIC_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED.
"""
import json
import sys
import time

from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer, ShareConsumer,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

req = json.loads(sys.argv[1])
conf = req["conf"]
action = req["action"]
out = {"action": action}


def name_of(err):
    if isinstance(err, KafkaException):
        err = err.args[0]
    if isinstance(err, KafkaError):
        return err.name()
    return str(err)


try:
    if action == "create":
        admin = AdminClient(conf)
        try:
            admin.create_topics([NewTopic(req["topic"], num_partitions=req["partitions"],
                                          replication_factor=1)])[req["topic"]].result(timeout=30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        out["created"] = True
    elif action == "group_config":
        admin = AdminClient(conf)
        res = ConfigResource(ResourceType.GROUP, req["group"], incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(timeout=30)
        out["set"] = True
    elif action == "produce":
        p = Producer(dict(conf, **{"linger.ms": 5, "message.timeout.ms": 10000, "acks": "all"}))
        errors = []
        for i in range(req["count"]):
            try:
                p.produce(req["topic"], value=f"v{i}".encode(), key=f"k{i}".encode(),
                          on_delivery=lambda e, m: errors.append(name_of(e)) if e else None)
            except KafkaException as e:
                errors.append(name_of(e))
            p.poll(0)
        left = p.flush(30)
        out["produced"] = req["count"] - left - len(errors)
        out["errors"] = sorted(set(errors))
    elif action == "consume":
        c = Consumer(dict(conf, **{"group.id": req.get("group", "p18acl-unused"),
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
        c.assign([TopicPartition(req["topic"], p, 0) for p in range(req["partitions"])])
        got, errors = 0, set()
        deadline = time.time() + req.get("seconds", 20)
        while got < req["count"] and time.time() < deadline:
            try:
                m = c.poll(0.5)
            except KafkaException as e:
                errors.add(name_of(e))
                continue
            if m is None:
                continue
            if m.error() is None:
                got += 1
            elif m.error().code() != KafkaError._PARTITION_EOF:
                errors.add(name_of(m.error()))
                if m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    break
        c.close()
        out["consumed"] = got
        out["errors"] = sorted(errors)
    elif action == "share":
        c = ShareConsumer(dict(conf, **{"group.id": req["group"]}))
        c.subscribe([req["topic"]])
        got, errors = 0, set()
        deadline = time.time() + req.get("seconds", 20)
        while got < req["count"] and time.time() < deadline:
            try:
                for m in c.poll(0.5):
                    if m.error() is None:
                        got += 1
                    elif m.error().code() != KafkaError._PARTITION_EOF:
                        errors.add(name_of(m.error()))
            except KafkaException as e:
                errors.add(name_of(e))
                if "AUTHORIZATION" in name_of(e):
                    break
        try:
            c.close()
        except KafkaException as e:
            errors.add(name_of(e))
        out["consumed"] = got
        out["errors"] = sorted(errors)
    elif action == "describe":
        admin = AdminClient(conf)

        def ops(found):
            return None if found is None else sorted(o.name for o in found)

        def describe(what, call):
            try:
                out[what] = ops(call().authorized_operations)
            except Exception as e:  # noqa: BLE001 - reported to the test
                out[what + "_error"] = name_of(e)

        describe("cluster", lambda: admin.describe_cluster(
            include_authorized_operations=True).result(timeout=30))
        describe("topic", lambda: admin.describe_topics(
            TopicCollection([req["topic"]]),
            include_authorized_operations=True)[req["topic"]].result(timeout=30))
        describe("group", lambda: admin.describe_consumer_groups(
            [req["group"]], include_authorized_operations=True)[req["group"]].result(timeout=30))
    else:
        out["error"] = f"unknown action {action}"
except Exception as e:  # noqa: BLE001 - the test asserts on the error text
    out["error"] = name_of(e)
print("RESULT " + json.dumps(out), flush=True)
