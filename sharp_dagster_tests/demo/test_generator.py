"""The sample shop generator: deterministic, and its changes replayed over the snapshot give its final state."""

from __future__ import annotations

import json

from sharp_dagster.demo.generator import GeneratorConfig, generate, read_changes
from sharp_dagster.demo.shop import TABLES


def test_same_seed_same_bytes(tmp_path):
    cfg = GeneratorConfig(days=3, users=50, products=10, orders_per_day=20, history_orders=20)
    generate(tmp_path / "a", cfg)
    generate(tmp_path / "b", cfg)
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jsonl"))
    assert files_a == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.jsonl"))
    for rel in files_a:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()


def test_replay_gives_final_state(tmp_path):
    cfg = GeneratorConfig(days=4, users=60, products=12, orders_per_day=30, history_orders=25)
    manifest = generate(tmp_path, cfg)
    state: dict[str, dict[tuple, dict]] = {}
    for name, table in TABLES.items():
        state[name] = {}
        for path in (tmp_path / "shop" / "snapshot" / name).glob("*.jsonl"):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                state[name][tuple(row[k] for k in table.primary_key)] = row
    seqs = []
    for day in cfg.day_keys:
        for change in read_changes(tmp_path, day):
            seqs.append(change["_seq"])
            table = TABLES[change["_table"]]
            key = tuple(change[k] for k in table.primary_key)
            if change["_op"] == "d":
                assert key in state[table.name], f"delete of a missing key {key} in {table.name}"
                del state[table.name][key]
            else:
                state[table.name][key] = change
    assert seqs == list(range(1, len(seqs) + 1)), "commit order is a gap-free sequence"
    assert {k: len(v) for k, v in state.items()} == manifest["final_rows"]
    ops = {c["_op"] for d in cfg.day_keys for c in read_changes(tmp_path, d)}
    assert ops == {"c", "u", "d"}
    shards = {
        c["_source_table"]
        for d in cfg.day_keys
        for c in read_changes(tmp_path, d)
        if c["_table"] == "user_info"
    }
    assert len(shards) > 1 and all(s.startswith("user_info_") for s in shards)
