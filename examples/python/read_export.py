#!/usr/bin/env python3
"""Reads the files `stockledger export` writes, with pyarrow (Parquet) and
Python's csv module, and prints what an analyst would check first as one
JSON object: rows, columns and their types, totals, the first and last rows.

    examples/python/read_export.sh --parquet week.parquet --csv week.csv

Either file may be left out. The tests compare the figures with the archive.
"""
import argparse
import csv
import json

import pyarrow.compute as pc
import pyarrow.parquet as pq


def summary_of_parquet(path):
    table = pq.read_table(path)
    occurred = table.column("occurred_at")
    return {
        "rows": table.num_rows,
        "columns": table.column_names,
        "types": {field.name: str(field.type) for field in table.schema},
        "delta_sum": pc.sum(table.column("delta")).as_py(),
        "null_order_ids": table.column("order_id").null_count,
        "first": row(table, 0),
        "last": row(table, table.num_rows - 1),
        "occurred_min": occurred_text(pc.min(occurred).as_py()),
    }


def row(table, i):
    values = {name: table.column(name)[i].as_py() for name in table.column_names}
    values["occurred_at"] = occurred_text(values["occurred_at"])
    return values


def occurred_text(value):
    # A timezone-aware datetime, as pyarrow reads TIMESTAMP(MILLIS, UTC).
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def summary_of_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "rows": len(rows),
        "columns": list(rows[0].keys()) if rows else [],
        "delta_sum": sum(int(r["delta"]) for r in rows),
        "null_order_ids": sum(1 for r in rows if r["order_id"] == ""),
        "first": rows[0] if rows else None,
        "last": rows[-1] if rows else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parquet")
    parser.add_argument("--csv")
    args = parser.parse_args()
    out = {}
    if args.parquet:
        out["parquet"] = summary_of_parquet(args.parquet)
    if args.csv:
        out["csv"] = summary_of_csv(args.csv)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
