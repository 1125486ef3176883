#!/usr/bin/env python3
"""A small order service in Python, written only against what stockledger
publishes: the schemas in schemas/history/ and the wire format in docs/producers.md.

It restocks a few SKUs, sends deducts and rollbacks for their orders (some
refused, some duplicated, a rollback before its deduct) and a hold it
confirms, sells a show's named seats (all or none), reads the applier's
decisions from the outcomes topic, and exits 1 unless every decision is the
one the ledger's rules give.

Producing follows docs/producers.md, "Publishing from any language": key = SKU as
UTF-8, the Java clients' partitioner (murmur2_random in librdkafka), the
idempotent producer, and Avro single-object encoding (C3 01, the writer
schema's CRC-64-AVRO fingerprint little-endian, the datum), all by
confluent-kafka and fastavro.

    examples/python/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger \\
        --outcomes-topic stock.ledger.outcomes --json
"""
import argparse
import io
import json
import os
import sys
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

HISTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "history")
MAGIC = b"\xc3\x01"


def released(subject):
    """Every released version of `subject`: {8-byte fingerprint: schema}, and the newest."""
    versions = []
    for name in os.listdir(HISTORY):
        if name.startswith(subject + ".v") and name.endswith(".avsc"):
            with open(os.path.join(HISTORY, name)) as f:
                schema = parse_schema(json.load(f))
            version = int(name[len(subject) + 2 : -len(".avsc")])
            # fastavro gives the fingerprint's bytes in the order they are framed.
            header = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
            versions.append((version, header, schema))
    versions.sort(key=lambda v: v[0])
    if not versions:
        sys.exit(f"no {subject}.v*.avsc in {HISTORY}")
    return {header: schema for _, header, schema in versions}, versions[-1]


COMMANDS, (_, COMMAND_HEADER, COMMAND_SCHEMA) = released("Command")
OUTCOMES, _ = released("Outcome")


def encode_command(sku, body_name, body):
    datum = {
        "command_id": str(uuid.uuid4()),
        "sku": sku,
        "occurred_at": int(time.time() * 1000),
        # (name, value) picks the union branch explicitly.
        "body": (f"stockledger.{body_name}", body),
    }
    out = io.BytesIO()
    out.write(MAGIC + COMMAND_HEADER)
    schemaless_writer(out, COMMAND_SCHEMA, datum)
    return out.getvalue()


def decode_outcome(payload):
    if payload[:2] != MAGIC or len(payload) < 10:
        raise ValueError("not Avro single-object encoding")
    writer = OUTCOMES.get(payload[2:10])
    if writer is None:
        raise ValueError(f"unknown outcome schema fingerprint {payload[2:10].hex()}")
    newest = list(OUTCOMES.values())[-1]
    return schemaless_reader(io.BytesIO(payload[10:]), writer, newest)


def script(sku):
    """One SKU's commands, in order, each with the decision the ledger's rules give."""
    return [
        ("Restock", {"adjustment_id": f"{sku}-initial", "mode": "SET", "quantity": 5}, "APPLIED"),
        ("Deduct", {"order_id": "o1", "quantity": 2}, "APPLIED"),
        ("Deduct", {"order_id": "o2", "quantity": 2}, "APPLIED"),
        ("Deduct", {"order_id": "o3", "quantity": 2}, "REJECTED_INSUFFICIENT"),
        ("Rollback", {"order_id": "o1", "reason": "payment failed"}, "APPLIED"),
        ("Deduct", {"order_id": "o3", "quantity": 2}, "APPLIED"),
        ("Deduct", {"order_id": "o1", "quantity": 1}, "REJECTED_CANCELLED"),
        ("Rollback", {"order_id": "o4", "reason": None}, "IGNORED_NO_DEDUCTION"),
        ("Deduct", {"order_id": "o4", "quantity": 1}, "REJECTED_CANCELLED"),
        ("Deduct", {"order_id": "o2", "quantity": 2}, "DUPLICATE"),
        # A hold: a deduct with a buyer and a deadline, then its confirmation.
        ("Deduct", {"order_id": "o5", "quantity": 1, "user_id": "u1",
                    "expires_at": int(time.time() * 1000) + 600_000}, "APPLIED"),
        ("Confirm", {"order_id": "o5"}, "CONFIRMED"),
    ]


def seats_script():
    """A show's named seats: put on sale, two held (all or none) and sold,
    an overlapping pair refused. Each outcome names the seats its command
    named."""
    return [
        ("Restock", {"adjustment_id": "hall", "mode": "ADD", "quantity": 3,
                     "units": ["A1", "A2", "A3"]}, "APPLIED"),
        ("Deduct", {"order_id": "s1", "quantity": 2, "units": ["A1", "A2"], "user_id": "u1",
                    "expires_at": int(time.time() * 1000) + 600_000}, "APPLIED"),
        ("Deduct", {"order_id": "s2", "quantity": 2, "units": ["A2", "A3"]},
         "REJECTED_INSUFFICIENT"),
        ("Confirm", {"order_id": "s1"}, "CONFIRMED"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default=os.environ.get("KAFKA_BROKERS", "127.0.0.1:9092"))
    parser.add_argument("--topic", default=os.environ.get("STOCKLEDGER_TOPIC", "stock.ledger"))
    parser.add_argument(
        "--outcomes-topic",
        default=os.environ.get("STOCKLEDGER_OUTCOMES_TOPIC", "stock.ledger.outcomes"),
    )
    parser.add_argument("--sku-prefix", default="PY", help="SKUs are PREFIX-0, PREFIX-1, …")
    parser.add_argument("--skus", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for decisions")
    parser.add_argument("--json", action="store_true", help="print each decided command as JSON")
    parser.add_argument(
        "--partitioner", default="murmur2_random",
        help="librdkafka partitioner; anything but murmur2_random (e.g. librdkafka's default, "
             "consistent_random) sends SKUs to partitions they do not live on: MISROUTED")
    args = parser.parse_args()

    producer = Producer({
        "bootstrap.servers": args.brokers,
        "enable.idempotence": True,
        "acks": "all",
        # The Java clients' partitioner, murmur2_random: the same partition
        # per SKU as every other producer of the ledger. librdkafka's
        # default (consistent_random) differs.
        "partitioner": args.partitioner,
    })
    sent = []  # one dict per command, in send order
    failures = []

    def delivered(entry):
        def callback(error, message):
            if error is not None:
                failures.append(f"{entry['sku']} {entry['kind']}: {error}")
            else:
                entry["partition"], entry["offset"] = message.partition(), message.offset()
        return callback

    scripts = [(f"{args.sku_prefix}-{i}", script(f"{args.sku_prefix}-{i}"))
               for i in range(args.skus)]
    scripts.append((f"{args.sku_prefix}-SHOW", seats_script()))
    for sku, steps in scripts:
        for kind, body, expected in steps:
            entry = {"sku": sku, "kind": kind.upper(), "body": body, "expected": expected}
            sent.append(entry)
            producer.produce(args.topic, key=sku.encode(), value=encode_command(sku, kind, body),
                             on_delivery=delivered(entry))
            producer.poll(0)
    if producer.flush(30) != 0 or failures:
        sys.exit(f"not every command was delivered: {failures}")

    # Read the decisions: every partition of the outcomes topic from the start.
    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        "group.id": f"python-order-service-{uuid.uuid4()}",
        "enable.auto.commit": False,
    })
    partitions = consumer.list_topics(args.outcomes_topic, timeout=10).topics[args.outcomes_topic]
    if partitions.error is not None:
        sys.exit(f"outcomes topic {args.outcomes_topic}: {partitions.error}")
    consumer.assign([TopicPartition(args.outcomes_topic, p, OFFSET_BEGINNING)
                     for p in partitions.partitions])
    waiting = {(e["partition"], e["offset"]): e for e in sent}
    deadline = time.monotonic() + args.timeout
    while waiting and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() != KafkaError._PARTITION_EOF:
                sys.exit(f"reading outcomes: {message.error()}")
            continue
        outcome = decode_outcome(message.value())
        if outcome["topic"] != args.topic:
            continue
        entry = waiting.pop((outcome["partition"], outcome["offset"]), None)
        if entry is not None:
            entry["outcome"] = outcome
    consumer.close()
    if waiting:
        sys.exit(f"{len(waiting)} of {len(sent)} commands got no decision within {args.timeout} s")

    wrong = 0
    for e in sent:
        o = e["outcome"]
        named = e["body"].get("units", []) if e["kind"] in ("DEDUCT", "RESTOCK") else []
        if o["result"] != e["expected"] or o["units"] != named:
            wrong += 1
            print(f"{e['sku']} {e['kind']} {e['body']}: decided {o['result']} ({o['reason']}) "
                  f"for units {o['units']}, expected {e['expected']} for {named}",
                  file=sys.stderr)
        if args.json:
            print(json.dumps({
                "sku": e["sku"], "kind": e["kind"], "body": e["body"],
                "partition": e["partition"], "offset": e["offset"], "result": o["result"],
                "delta": o["delta"], "available_after": o["available_after"],
                "total_after": o["total_after"],
            }))
    print(f"{len(sent) - wrong} of {len(sent)} commands decided as expected", file=sys.stderr)
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
