#!/usr/bin/env python3
"""kcat (Debian's, on Debian's librdkafka) produce + consume round trip.

  kcat_roundtrip.py --bootstrap H:P --topic T [--partitions 3] [--count 5000] [--mode both|verify]
                    [--kcat kcat]

both:   creates the topic (confluent-kafka AdminClient: kcat cannot create topics), lists it with
        `kcat -L`, produces --count "key<TAB>value" lines with `kcat -P` (acks=all, idempotence,
        a header on every record, keys spread by kcat's default partitioner), then verifies.
verify: `kcat -C -e` over all partitions from the beginning (no group): every record exactly once,
        key, value and header byte-exact, per-partition offsets 0..n-1 in production order.
Prints one line "RESULT {json}" and exits 0 only if everything matched.
"""

import argparse
import subprocess
import sys
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

import records as R


def line(i):
    # text only (kcat is line based); lengths vary from 1 to 300 bytes
    k = "kcat-key-%06d" % i
    v = ("v%d:" % i) + "".join(chr(0x21 + (b % 94)) for b in R.BLOB[(i * 7) % 60000:][: i % 300])
    return k, v


HEADER = ("src", "kcat")


def run(cmd, **kw):
    R.log("+", " ".join(cmd))
    return subprocess.run(cmd, capture_output=True, timeout=120, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--mode", choices=["both", "verify"], default="both")
    ap.add_argument("--kcat", default="kcat")
    a = ap.parse_args()
    out = {"mode": a.mode, "topic": a.topic}
    ok = True
    try:
        ver = run([a.kcat, "-V"]).stdout.decode(errors="replace").splitlines()
        out["client"] = "kcat " + next((l for l in ver if l.startswith("Version")), ver[0] if ver else "?")[:100]
        common = ["-b", a.bootstrap, "-X", "broker.address.family=v4", "-X", "client.id=lockstep-interop-kcat"]
        if a.mode == "both":
            admin = AdminClient({"bootstrap.servers": a.bootstrap, "client.id": "lockstep-interop-kcat-admin"})
            try:
                admin.create_topics([NewTopic(a.topic, num_partitions=a.partitions, replication_factor=1)])[
                    a.topic].result(timeout=60)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            # metadata through kcat itself
            deadline = time.time() + 30
            while True:
                md = run([a.kcat, *common, "-L", "-t", a.topic]).stdout.decode(errors="replace")
                if md.count("partition ") >= a.partitions and "leader -1" not in md:
                    break
                if time.time() > deadline:
                    raise RuntimeError("kcat -L does not show the topic: " + md)
                time.sleep(0.3)
            data = "".join("%s\t%s\n" % line(i) for i in range(a.count)).encode()
            p = run([a.kcat, *common, "-P", "-t", a.topic, "-K", "\t", "-H", "%s=%s" % HEADER,
                     "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=5"], input=data)
            out["produce_rc"] = p.returncode
            if p.returncode != 0:
                R.log(p.stderr.decode(errors="replace")[-2000:])
                ok = False
        c = run([a.kcat, *common, "-C", "-t", a.topic, "-o", "beginning", "-e", "-q",
                 "-f", "%p\\t%o\\t%k\\t%s\\t%h\\n"])
        out["consume_rc"] = c.returncode
        if c.returncode != 0:
            R.log(c.stderr.decode(errors="replace")[-2000:])
            ok = False
        seen = {}
        next_off = {}
        last_i = {}
        mismatches = []
        for ln in c.stdout.decode(errors="replace").splitlines():
            if not ln:
                continue
            f = ln.split("\t")
            if len(f) != 5:
                mismatches.append("bad line " + ln[:200])
                continue
            part, off, k, v, h = int(f[0]), int(f[1]), f[2], f[3], f[4]
            if off != next_off.get(part, 0):
                mismatches.append(f"p{part}: offset {off}, expected {next_off.get(part, 0)}")
            next_off[part] = off + 1
            try:
                i = int(k.rsplit("-", 1)[1])
            except (IndexError, ValueError):
                mismatches.append("bad key " + k[:100])
                continue
            if i in seen:
                mismatches.append(f"record {i} duplicated")
            seen[i] = part
            if i <= last_i.get(part, -1):
                mismatches.append(f"p{part}: record {i} after {last_i[part]} (order)")
            last_i[part] = i
            if (k, v) != line(i) or h != "%s=%s" % HEADER:
                mismatches.append(f"record {i} differs: {ln[:200]!r}")
        missing = a.count - len([i for i in seen if i < a.count])
        for mm in mismatches[:10]:
            R.log("MISMATCH", mm)
        out.update(consumed=sum(next_off.values()), expected=a.count, missing=missing,
                   mismatches=len(mismatches), partitions_used=len(next_off))
        ok &= not mismatches and missing == 0 and len(seen) == a.count
    except Exception as e:
        R.log("exception:", repr(e))
        out["exception"] = repr(e)
        ok = False
    out["ok"] = bool(ok)
    R.result(out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
