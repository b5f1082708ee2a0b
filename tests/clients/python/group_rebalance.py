"""A librdkafka consumer group (confluent-kafka) for tests/consumer_groups.rs.

usage: group_rebalance.py BOOTSTRAP TOPIC GROUP first|resume

first:  produces 40 records over the topic's 4 partitions; consumer A joins and gets all 4
        partitions; consumer B joins and the group rebalances to 2 + 2; B leaves and A gets all
        4 again; A commits its positions and closes. Prints one JSON line:
        {"alone": [...], "a": [...], "b": [...], "after_leave": [...], "committed": {p: offset}}
resume: a new consumer of the group reads until idle; prints
        {"first_offsets": {p: offset}, "count": n}
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, topic, group, phase = sys.argv[1:5]
PARTITIONS = 4
DEADLINE = time.time() + 60


def consumer(name):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
    })
    state = {"assigned": []}

    def on_assign(_c, parts):
        state["assigned"] = sorted(p.partition for p in parts)

    def on_revoke(_c, parts):
        state["assigned"] = []

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    return c, state


def poll_until(pairs, cond):
    while not cond():
        if time.time() > DEADLINE:
            raise SystemExit("timed out: " + json.dumps([s["assigned"] for _, s in pairs]))
        for c, _ in pairs:
            m = c.poll(0.05)
            if m is not None and m.error():
                print("error:", m.error(), file=sys.stderr)


if phase == "first":
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        p.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
    p.flush(30)
    a, sa = consumer("a")
    poll_until([(a, sa)], lambda: len(sa["assigned"]) == PARTITIONS)
    alone = sa["assigned"]
    b, sb = consumer("b")
    poll_until([(a, sa), (b, sb)],
               lambda: len(sa["assigned"]) == 2 and len(sb["assigned"]) == 2)
    split = (sa["assigned"], sb["assigned"])
    b.close()
    poll_until([(a, sa)], lambda: len(sa["assigned"]) == PARTITIONS)
    after = sa["assigned"]
    # Read some records, then commit the positions.
    got = 0
    while got < 20 and time.time() < DEADLINE:
        m = a.poll(0.2)
        if m is not None and not m.error():
            got += 1
    a.commit(asynchronous=False)
    committed = a.committed([TopicPartition(topic, i) for i in range(PARTITIONS)], timeout=10)
    a.close()
    print(json.dumps({
        "alone": alone, "a": split[0], "b": split[1], "after_leave": after,
        "committed": {str(tp.partition): tp.offset for tp in committed},
    }))
else:
    c, s = consumer("c")
    first, count, idle = {}, 0, None
    while time.time() < DEADLINE:
        m = c.poll(0.2)
        if m is None or m.error():
            if count and idle and time.time() - idle > 3:
                break
            if idle is None or count == 0:
                idle = time.time()
            continue
        idle = time.time()
        first.setdefault(str(m.partition()), m.offset())
        count += 1
    c.close()
    print(json.dumps({"first_offsets": first, "count": count}))
