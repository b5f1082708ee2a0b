#!/usr/bin/env python3
"""Prints the README's table of benchmark figures (Markdown) from the broker bench's JSON report.

    cargo bench --profile dist --bench broker      # writes target/bench-reports/broker.json
    python3 tools/bench-table.py [REPORT.json]     # default: target/bench-reports/broker.json

The report is what benches/broker.rs serializes (struct Report): `commit`, `machine.cpus`, `plan`,
`brokers` (one per broker, `name` "lockstep" / "kafka", each phase's figures with their `cost`),
`storage.engine_group_commit` (the storage engine's group commit against O_DIRECT writes of fresh
data) and `targets` (name, ratio, wanted, met). Python 3 standard library only.
"""

import json
import os
import sys

DEFAULT_REPORT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "target", "bench-reports", "broker.json"
)

# Row label -> the start of the name of the bench's target judging it (benches/broker.rs, targets()).
TARGETS = {
    "produce p99": "produce p99 latency",
    "produce cpu": "broker CPU per produced record",
    "share rate": "share-consume records/s",
    "share cpu": "share-consume broker CPU per record",
    "group commit": "group-commit durable append vs O_DIRECT bandwidth",
}


def number(v):
    """Figures as the README writes them: thousands separated by a space, 3 significant digits
    below 1 000."""
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{round(v):,}".replace(",", " ")
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio_text(r):
    return "–" if r is None else f"{r:.2f}"


def get(obj, *path):
    """obj[path[0]][path[1]]..., None where a step is missing or null."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def ratio(a, b):
    return a / b if a is not None and b else None


def target_text(target):
    if target is None:
        return ""
    wanted = target.get("wanted", "").replace("<=", "≤").replace(">=", "≥")
    met = target.get("met")
    verdict = "not judged" if met is None else ("met" if met else "not met")
    return f"{wanted}: {verdict}"


def table(report):
    brokers = {b.get("name"): b for b in report.get("brokers", [])}
    lockstep, kafka = brokers.get("lockstep"), brokers.get("kafka")
    targets = {}
    for key, prefix in TARGETS.items():
        targets[key] = next(
            (t for t in report.get("targets", []) if t.get("name", "").startswith(prefix)), None
        )
    plan = report.get("plan", {})
    lines = [
        f"Commit `{report.get('commit', '?')}`, {get(report, 'machine', 'cpus')} CPUs; "
        f"{number(plan.get('records'))} records of {number(plan.get('record_bytes'))} bytes, "
        f"{plan.get('partitions')} partitions.",
        "",
        "| | Lockstep | Kafka 4.4 | Lockstep / Kafka | target |",
        "| --- | --- | --- | --- | --- |",
    ]

    def row(label, path, key=None):
        a, b = get(lockstep, *path), get(kafka, *path)
        t = targets.get(key) if key else None
        # A target's ratio is the bench's own (None when a phase was incomplete).
        r = t.get("ratio") if t else ratio(a, b)
        lines.append(f"| {label} | {number(a)} | {number(b)} | {ratio_text(r)} | {target_text(t)} |")

    def pair_row(label, first, second):
        cells = []
        for broker in (lockstep, kafka):
            cells.append(f"{number(get(broker, *first))} / {number(get(broker, *second))}")
        ratios = [
            ratio(get(lockstep, *p), get(kafka, *p)) for p in (first, second)
        ]
        lines.append(
            f"| {label} | {cells[0]} | {cells[1]} | "
            f"{ratio_text(ratios[0])} / {ratio_text(ratios[1])} | |"
        )

    row("produce records/s", ("produce", "records_per_s"))
    row("produce p99 ms", ("produce", "p99_ms"), "produce p99")
    row("produce broker CPU µs/record", ("produce", "cost", "broker_cpu_us_per_record"), "produce cpu")
    row("share-consume records/s", ("share_consume", "records_per_s"), "share rate")
    row(
        "share-consume broker CPU µs/record",
        ("share_consume", "cost", "broker_cpu_us_per_record"),
        "share cpu",
    )
    pair_row(
        "TLS produce / share-consume records/s",
        ("tls_produce", "records_per_s"),
        ("tls_share_consume", "records_per_s"),
    )
    pair_row(
        "SASL_SSL produce / share-consume records/s",
        ("sasl_produce", "records_per_s"),
        ("sasl_share_consume", "records_per_s"),
    )
    txn_rate = ("txn_produce", "produce", "records_per_s")
    txn_cpu = ("txn_produce", "produce", "cost", "broker_cpu_us_per_record")
    lines.append(
        "| transactional produce records/s (broker CPU µs/record) | "
        + " | ".join(
            f"{number(get(b, *txn_rate))} ({number(get(b, *txn_cpu))})" for b in (lockstep, kafka)
        )
        + f" | {ratio_text(ratio(get(lockstep, *txn_rate), get(kafka, *txn_rate)))}"
        + f" ({ratio_text(ratio(get(lockstep, *txn_cpu), get(kafka, *txn_cpu)))}) | |"
    )
    row("broker peak RSS MiB", ("broker_peak_rss_mib",))

    # The judged case of the storage engine's group commit: a new log (no retention), the
    # producer-sized batches (at most 16 KiB), as targets() in benches/broker.rs picks it.
    engine = next(
        (
            g
            for g in get(report, "storage", "engine_group_commit") or []
            if g.get("batch_bytes", 0) <= 16 << 10 and g.get("retention_bytes") is None
        ),
        None,
    )
    if engine is not None:
        t = targets.get("group commit")
        r = t.get("ratio") if t else engine.get("ratio")
        lines.append(
            f"| group commit MB/s: storage engine ({round(engine.get('batch_bytes', 0) / 1024)} "
            f"KiB batches × {number(engine.get('appenders'))} appenders) vs O_DIRECT of fresh data | "
            f"{number(engine.get('mb_per_s'))} vs {number(engine.get('direct_mb_per_s'))} | | "
            f"{ratio_text(r)} | {target_text(t)} |"
        )

    for broker in (lockstep, kafka):
        if broker is None:
            continue
        for why in ("not_run", "failed"):
            if broker.get(why):
                lines.append("")
                lines.append(f"{broker.get('name')} {why.replace('_', ' ')}: {broker[why]}")
    return "\n".join(line.replace("|  |", "| |") for line in lines)


def main(argv):
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip())
        return 0
    path = argv[1] if len(argv) > 1 else DEFAULT_REPORT
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except OSError as e:
        print(f"bench-table: {e} (run `cargo bench --profile dist --bench broker` first)",
              file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        print(f"bench-table: {path}: not JSON: {e}", file=sys.stderr)
        return 1
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
