#!/usr/bin/env python3
"""confluent-kafka 2.16 ShareConsumer (KIP-932) scenarios.

  share_consume.py --bootstrap H:P --topic T --group G --scenario S [--partitions 1] [--count N]
                   [--consumers K] [--state-file F] [--limit X]

Every scenario that produces first creates the topic and produces --count records (records.py,
partition i % partitions, acks=all, idempotence) and sets the GROUP config
share.auto.offset.reset=earliest (IncrementalAlterConfigs): share groups start at the latest offset
otherwise. Every delivered record is checked byte-exact against the generator.

  implicit  K consumers (threads, one ShareConsumer each, implicit acks = ACCEPT on the next poll)
            on the same partitions: the sets they receive are disjoint and together hold every
            record exactly once, each with delivery count 1; at least 2 consumers got records.
  explicit  one consumer, explicit acks by offset: i % 3 == 0 ACCEPT, == 1 RELEASE (always),
            == 2 REJECT. ACCEPT/REJECT records arrive once (delivery count 1); RELEASE records come
            back with delivery counts 1, 2, ... up to share.delivery.count.limit (group config set to
            --limit, default 3) and are then archived: a fresh consumer gets nothing more.
  kill      a child process acquires records (explicit mode, no ack) and SIGKILLs itself; a second
            consumer must then get exactly those records again with delivery count 2.
  drain     (no produce) one explicit consumer ACCEPTs the first --limit records it gets, RELEASEs the
            rest, commits and closes; the accepted (partition, offset) pairs go to --state-file.
  rest      (no produce) one consumer ACCEPTs everything until the records in --state-file plus the
            new ones cover all --count records: no record accepted before may arrive again.
  close     one explicit consumer ACCEPTs every record of its polls without committing, then
            closes: close() delivers the pending acknowledgements, and the acknowledgement commit
            callback reports every partition's receipt without error (each received offset exactly
            once, before or at close); a fresh consumer then gets only a sentinel record.
  produce   only create the topic, produce and set the group config.
Prints one line "RESULT {json}" and exits 0 only if every check held.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import (AcknowledgeType, KafkaError, KafkaException, Producer, ShareConsumer)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

import records as R


class Ctx:
    def __init__(self, a):
        self.a = a
        self.errors = []
        self.lock = threading.Lock()

    def err(self, s):
        with self.lock:
            self.errors.append(s)
        R.log("CHECK FAILED:", s)


def setup(a, group_configs):
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "client.id": "lockstep-interop-share-admin"})
    try:
        admin.create_topics([NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1)])[
            a.topic].result(timeout=60)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    p = Producer({"bootstrap.servers": a.bootstrap, "client.id": "lockstep-interop-share-producer",
                  "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for i in range(a.count):
        p.produce(a.topic, value=R.value(i), key=R.key(i), headers=R.headers(i) or None,
                  partition=i % a.partitions, timestamp=R.timestamp(i),
                  on_delivery=lambda err, msg: err and failed.append(str(err)))
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(60) or failed:
        raise RuntimeError(f"produce failed: {failed[:3]}")
    res = ConfigResource(ResourceType.GROUP, a.group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in group_configs.items()])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)
    R.log(f"produced {a.count} records to {a.topic}; group {a.group} configs {group_configs}")


def new_consumer(a, mode, n=0):
    conf = {"bootstrap.servers": a.bootstrap, "group.id": a.group,
            "client.id": f"lockstep-interop-share-{n}", "share.acknowledgement.mode": mode}
    if a.debug:
        conf["debug"] = a.debug
    c = ShareConsumer(conf)
    c.subscribe([a.topic])
    return c


def index_of(a, m):
    return m.offset() * a.partitions + m.partition()


def check_record(ctx, m):
    a = ctx.a
    i = index_of(a, m)
    if m.topic() != a.topic or not 0 <= i < a.count:
        ctx.err(f"unexpected record {m.topic()} p{m.partition()} o{m.offset()}")
        return None
    got = (m.key(), m.value(), m.headers(), m.timestamp()[1] if R.base_ts is not None else None)
    if got != (R.key(i), R.value(i), R.headers(i) or None, R.timestamp(i) if R.base_ts is not None else None):
        ctx.err(f"record {i} (p{m.partition()} o{m.offset()}) content differs")
    return i


def poll_ok(ctx, c, timeout):
    out = []
    for m in c.poll(timeout):
        if m.error():
            if m.error().code() not in (KafkaError._PARTITION_EOF,):
                ctx.err(f"poll error: {m.error()}")
            continue
        out.append(m)
    return out


def scenario_implicit(ctx, out):
    a = ctx.a
    got = {}  # index -> consumer number
    dup = []
    per = [0] * a.consumers
    stop = threading.Event()
    dcs_bad = []

    def worker(n):
        c = new_consumer(a, "implicit", n)
        try:
            while not stop.is_set():
                ms = poll_ok(ctx, c, 0.5)
                for m in ms:
                    i = check_record(ctx, m)
                    if i is None:
                        continue
                    if m.delivery_count() != 1:
                        dcs_bad.append((i, m.delivery_count()))
                    with ctx.lock:
                        if i in got:
                            dup.append((i, got[i], n))
                        got[i] = n
                        per[n] += 1
                if ms:
                    # pretend to work so that the other members get to join and share the partitions
                    time.sleep(0.002 * len(ms))
        finally:
            c.close()  # commits the last poll's implicit ACCEPTs and leaves the group

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(a.consumers)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    deadline = time.time() + a.timeout
    while len(got) < a.count and time.time() < deadline and not ctx.errors:
        time.sleep(0.1)
    time.sleep(2)  # anything delivered twice would show up now
    stop.set()
    for t in threads:
        t.join(60)
    out.update(received=len(got), duplicates=len(dup), per_consumer=per, bad_delivery_counts=len(dcs_bad))
    if len(got) != a.count:
        ctx.err(f"received {len(got)} distinct records, expected {a.count}")
    if dup:
        ctx.err(f"{len(dup)} records delivered twice, e.g. {dup[:5]}")
    if dcs_bad:
        ctx.err(f"delivery count != 1: {dcs_bad[:5]}")
    if a.consumers > 1 and sum(1 for x in per if x) < 2:
        ctx.err(f"only one consumer received records: {per}")


def scenario_explicit(ctx, out):
    a = ctx.a
    seen = {}  # index -> list of delivery counts
    c = new_consumer(a, "explicit")
    last_new = None  # joining takes a heartbeat or two: the idle clock starts with the first record
    deadline = time.time() + a.timeout
    try:
        while time.time() < deadline and (last_new is None or time.time() - last_new < a.idle):
            ms = poll_ok(ctx, c, 0.5)
            for m in ms:
                i = check_record(ctx, m)
                if i is None:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    continue
                seen.setdefault(i, []).append(m.delivery_count())
                kind = i % 3
                c.acknowledge(m, (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT)[kind])
                last_new = time.time()
            if ms:
                r = c.commit_sync(30)
                for tp, e in (r or {}).items():
                    if e is not None:
                        ctx.err(f"commit_sync {tp}: {e}")
    finally:
        c.close()
    for i in range(a.count):
        dcs = seen.get(i)
        want = list(range(1, a.limit + 1)) if i % 3 == 1 else [1]
        if dcs != want:
            ctx.err(f"record {i} ({['accept', 'release', 'reject'][i % 3]}): delivery counts {dcs}, expected {want}")
    # everything is now acknowledged or archived: a fresh member gets only a sentinel produced now
    p = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "enable.idempotence": True})
    p.produce(a.topic, key=b"sentinel", value=b"sentinel", partition=0)
    if p.flush(30):
        ctx.err("sentinel not produced")
    c2 = new_consumer(a, "explicit", 1)
    extra = []
    sentinel = False
    try:
        t_end = time.time() + a.timeout
        while time.time() < t_end and not sentinel:
            for m in poll_ok(ctx, c2, 0.5):
                if m.key() == b"sentinel":
                    sentinel = True
                else:
                    extra.append(index_of(a, m))
                c2.acknowledge(m, AcknowledgeType.ACCEPT)
    finally:
        c2.close()
    if not sentinel:
        ctx.err("fresh consumer did not receive the sentinel record")
    if extra:
        ctx.err(f"records delivered after all were acknowledged/archived: {extra[:10]}")
    out.update(distinct=len(seen), deliveries=sum(len(v) for v in seen.values()), after_archive=len(extra),
               limit=a.limit)


def scenario_kill(ctx, out):
    a = ctx.a
    # child: acquire one batch without acknowledging, report it, die by SIGKILL
    child = subprocess.run([sys.executable, __file__, "--bootstrap", a.bootstrap, "--topic", a.topic,
                            "--group", a.group, "--partitions", str(a.partitions), "--count", str(a.count),
                            "--scenario", "_acquire_and_die", "--timeout", str(a.timeout),
                            "--base-ts", str(R.base_ts)],
                           capture_output=True, timeout=a.timeout + 30)
    if child.returncode != -signal.SIGKILL:
        ctx.err(f"child exited with {child.returncode}, not SIGKILL: {child.stderr.decode()[-1000:]}")
        return
    held = json.loads(child.stdout.decode().strip().splitlines()[-1])
    R.log(f"killed consumer held {len(held)} records")
    if not held:
        ctx.err("killed consumer acquired nothing")
        return
    t0 = time.time()
    c = new_consumer(a, "explicit", 1)
    again = {}
    try:
        while len(again) < len(held) and time.time() - t0 < a.timeout:
            for m in poll_ok(ctx, c, 0.5):
                i = check_record(ctx, m)
                again[i] = m.delivery_count()
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync(30)
    finally:
        c.close()
    redelivered = {i: again.get(i) for i in held}
    wrong = {i: dc for i, dc in redelivered.items() if dc != 2}
    out.update(held=len(held), redelivered=sum(1 for v in redelivered.values() if v),
               redelivery_seconds=round(time.time() - t0, 2))
    if wrong:
        ctx.err(f"records held by the killed consumer not redelivered with delivery count 2: "
                f"{list(wrong.items())[:10]}")


def acquire_and_die(ctx):
    a = ctx.a
    c = new_consumer(a, "explicit")
    deadline = time.time() + a.timeout
    while time.time() < deadline:
        ms = poll_ok(ctx, c, 0.5)
        if ms:
            print(json.dumps([index_of(a, m) for m in ms]), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    print("[]", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def scenario_drain(ctx, out):
    a = ctx.a
    accepted = []
    c = new_consumer(a, "explicit")
    deadline = time.time() + a.timeout
    try:
        while len(accepted) < a.limit and time.time() < deadline:
            ms = poll_ok(ctx, c, 0.5)
            for m in ms:
                i = check_record(ctx, m)
                if len(accepted) < a.limit:
                    accepted.append(i)
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                else:
                    c.acknowledge(m, AcknowledgeType.RELEASE)
            if ms:
                for tp, e in (c.commit_sync(30) or {}).items():
                    if e is not None:
                        ctx.err(f"commit_sync {tp}: {e}")
    finally:
        c.close()
    with open(a.state_file, "w") as f:
        json.dump(accepted, f)
    out.update(accepted=len(accepted))
    if len(accepted) != a.limit:
        ctx.err(f"accepted {len(accepted)} records, wanted {a.limit}")


def scenario_rest(ctx, out):
    a = ctx.a
    with open(a.state_file) as f:
        before = set(json.load(f))
    now = set()
    again = []
    c = new_consumer(a, "explicit")
    deadline = time.time() + a.timeout
    try:
        while len(before | now) < a.count and time.time() < deadline:
            ms = poll_ok(ctx, c, 0.5)
            for m in ms:
                i = check_record(ctx, m)
                if i in before:
                    again.append(i)
                now.add(i)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if ms:
                c.commit_sync(30)
    finally:
        c.close()
    out.update(accepted_before=len(before), received_now=len(now), redelivered_after_accept=len(again))
    if again:
        ctx.err(f"{len(again)} records accepted before came again: {again[:10]}")
    if len(before | now) != a.count:
        ctx.err(f"only {len(before | now)} of {a.count} records were ever accepted")


def scenario_close(ctx, out):
    a = ctx.a
    receipts = {}  # (partition, offset) -> count of receipts
    errors = []

    def on_commit(offsets, err):
        if err is not None:
            errors.append(str(err))
        for tp, offs in (offsets or {}).items():
            if tp.error is not None:
                errors.append(f"{tp.topic}-{tp.partition}: {tp.error}")
            for o in offs:
                receipts[(tp.partition, o)] = receipts.get((tp.partition, o), 0) + 1

    got = set()
    c = new_consumer(a, "explicit")
    c.set_acknowledgement_commit_callback(on_commit)
    deadline = time.time() + a.timeout
    closed = False
    try:
        while len(got) < a.count and time.time() < deadline:
            for m in poll_ok(ctx, c, 0.5):
                check_record(ctx, m)
                got.add((m.partition(), m.offset()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
        before_close = len(receipts)
        c.close()  # the acknowledgements of the last poll are still pending here
        closed = True
    finally:
        if not closed:
            c.close()
    at_close = len(receipts) - before_close
    out.update(received=len(got), receipts=len(receipts), receipts_at_close=at_close,
               callback_errors=len(errors))
    if len(got) != a.count:
        ctx.err(f"received {len(got)} of {a.count} records")
    if errors:
        ctx.err(f"acknowledgement commit callback errors: {errors[:5]}")
    missing = got - set(receipts)
    if missing:
        ctx.err(f"{len(missing)} acknowledged records without a receipt, e.g. {sorted(missing)[:5]}")
    twice = [k for k, n in receipts.items() if n > 1]
    if twice:
        ctx.err(f"{len(twice)} receipts reported twice, e.g. {twice[:5]}")
    if at_close == 0:
        ctx.err("close() reported no receipts (the last poll's acknowledgements were pending)")
    # Every record was acknowledged: a fresh member gets only a sentinel produced now.
    p = Producer({"bootstrap.servers": a.bootstrap, "client.id": "lockstep-interop-share-producer"})
    p.produce(a.topic, value=b"sentinel", key=b"sentinel", partition=0)
    p.flush(30)
    extra, sentinel = [], False
    c2 = new_consumer(a, "explicit", 1)
    deadline = time.time() + a.timeout
    try:
        while not sentinel and time.time() < deadline:
            for m in poll_ok(ctx, c2, 0.5):
                if m.key() == b"sentinel":
                    sentinel = True
                else:
                    extra.append((m.partition(), m.offset()))
                c2.acknowledge(m, AcknowledgeType.ACCEPT)
    finally:
        c2.close()
    out.update(redelivered=len(extra))
    if not sentinel:
        ctx.err("the fresh consumer did not receive the sentinel")
    if extra:
        ctx.err(f"{len(extra)} records came again after close acknowledged them: {extra[:5]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--scenario", required=True,
                    choices=["implicit", "explicit", "kill", "drain", "rest", "close", "produce",
                             "_acquire_and_die"])
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--consumers", type=int, default=3)
    ap.add_argument("--limit", type=int, default=3)
    ap.add_argument("--state-file", default="")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--idle", type=float, default=4)
    ap.add_argument("--base-ts", type=int, default=None,
                    help="timestamps to check against (default: now for scenarios that produce, else unchecked)")
    ap.add_argument("--debug", default="")
    a = ap.parse_args()
    R.base_ts = a.base_ts
    if R.base_ts is None and a.scenario in ("implicit", "explicit", "kill", "close", "produce"):
        R.base_ts = R.now_ms()
    ctx = Ctx(a)
    if a.scenario == "_acquire_and_die":
        acquire_and_die(ctx)
        return
    import confluent_kafka
    out = {"client": "confluent-kafka " + confluent_kafka.__version__, "librdkafka": confluent_kafka.libversion()[0],
           "scenario": a.scenario, "count": a.count,
           "base_ts": R.base_ts}
    t0 = time.time()
    try:
        if a.scenario in ("implicit", "explicit", "kill", "close", "produce"):
            cfg = {"share.auto.offset.reset": "earliest"}
            if a.scenario == "explicit":
                cfg["share.delivery.count.limit"] = str(a.limit)
            setup(a, cfg)
        {"implicit": scenario_implicit, "explicit": scenario_explicit, "kill": scenario_kill,
         "drain": scenario_drain, "rest": scenario_rest, "close": scenario_close,
         "produce": lambda c, o: None}[a.scenario](ctx, out)
    except Exception as e:
        import traceback
        traceback.print_exc()
        ctx.err("exception: " + repr(e))
    out["seconds"] = round(time.time() - t0, 2)
    out["failures"] = len(ctx.errors)
    out["ok"] = not ctx.errors
    R.result(out)
    sys.exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
