#!/usr/bin/env python3
"""Holds one confluent-kafka ShareConsumer in a share group, for tests that look at a group with
a member (tests/share_admin_tool.rs).

  share_hold.py --bootstrap H:P --topic T --group G [--client-id C]

Subscribes, polls (implicit acknowledgement) until the member has joined and received at least one
record, prints "HOLDING" on stdout, then keeps polling until stdin is closed; then closes the
consumer (leaving the group) and prints one line "RESULT {json}". Exits 0 only if a record came.
"""

import argparse
import json
import sys
import threading
import time

from confluent_kafka import ShareConsumer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--client-id", default="lockstep-share-hold")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    c = ShareConsumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                       "client.id": a.client_id, "share.acknowledgement.mode": "implicit"})
    c.subscribe([a.topic])
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    received = 0
    deadline = time.monotonic() + a.timeout
    while received == 0 and time.monotonic() < deadline and not done.is_set():
        received += sum(1 for m in c.poll(0.5) if not m.error())
    if received:
        print("HOLDING", flush=True)
    while not done.is_set() and time.monotonic() < deadline + 600:
        received += sum(1 for m in c.poll(0.5) if not m.error())
    c.close()
    print("RESULT " + json.dumps({"ok": received > 0, "received": received}), flush=True)
    sys.exit(0 if received > 0 else 1)


if __name__ == "__main__":
    main()
