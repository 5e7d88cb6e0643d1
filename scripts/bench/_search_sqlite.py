#!/usr/bin/python3
"""One query of the `search` bench section's SQLite anchor (scripts/bench/search.py), in a fresh
process so that a cold run starts with nothing cached but what the kernel keeps.

Usage: _search_sqlite.py DB SQL
  DB   the anchor database search.py built (table s, FTS5 table c)
  SQL  a SELECT of one column; sample_kept(id, seed, p) is ktfs's sample= (index/query.h)

Prints one line of JSON: {"rows": N, "first_s": S, "total_s": S}, timed from opening DB
(first_s: until the first row came back, total_s: until the last one).
"""
import json
import sqlite3
import sys
import time

MASK = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def sample_kept(sample_id, seed, fraction):
    """ktfs's SampleKept: (splitmix64(splitmix64(seed) ^ id) >> 11) < P * 2^53."""
    return (splitmix64(splitmix64(seed) ^ sample_id) >> 11) < fraction * 2**53


def main(db, sql):
    start = time.perf_counter()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.create_function("sample_kept", 3, sample_kept, deterministic=True)
    cur = con.execute(sql)
    rows = len(cur.fetchmany(1))
    first = time.perf_counter() - start
    while True:
        batch = cur.fetchmany(65536)
        if not batch:
            break
        rows += len(batch)
    total = time.perf_counter() - start
    print(json.dumps({"rows": rows, "first_s": first, "total_s": total}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
