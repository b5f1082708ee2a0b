#!/usr/bin/env python3
"""Summarises a Kafka broker request log (tools/kafka-reference.sh with KAFKA_REQUEST_LOG=1):
which client sent which API key at which version, how often, and with which error codes.

  request_log_summary.py DIR/request.log [CLIENT_ID_SUBSTRING]
"""
import collections
import json
import re
import sys

path = sys.argv[1]
want = sys.argv[2] if len(sys.argv) > 2 else None
counts = collections.Counter()
errors = collections.defaultdict(collections.Counter)
software = {}
for line in open(path, errors="replace"):
    i = line.find("Completed request:")
    if i < 0:
        continue
    body = line[i + len("Completed request:"):]
    # the JSON object ends before the trailing " (kafka.request.logger)" / timing fields are inside
    body = body[: body.rfind("}") + 1]
    try:
        d = json.loads(body)
    except ValueError:
        continue
    h = d.get("requestHeader", {})
    cid = h.get("clientId") or ""
    if want and want not in cid:
        continue
    key = (cid, h.get("requestApiKey"), h.get("requestApiKeyName"), h.get("requestApiVersion"))
    counts[key] += 1
    req = d.get("request") or {}
    if h.get("requestApiKeyName") == "API_VERSIONS" and "clientSoftwareName" in req:
        software[cid] = f'{req.get("clientSoftwareName")} {req.get("clientSoftwareVersion")}'
    resp = json.dumps(d.get("response"))
    for code in re.findall(r'"errorCode": (-?\d+)', resp):
        if code != "0":
            errors[key][int(code)] += 1
for cid, sw in sorted(software.items()):
    print(f"# client.id {cid!r}: {sw}")
print(f"{'client.id':34} {'key':>4} {'api':32} {'ver':>3} {'count':>7}  errors(code:n)")
for key in sorted(counts, key=lambda k: (k[0], k[1], k[3])):
    cid, k, name, ver = key
    e = " ".join(f"{c}:{n}" for c, n in sorted(errors[key].items()))
    print(f"{cid[:34]:34} {k:>4} {name:32} {ver:>3} {counts[key]:>7}  {e}")
