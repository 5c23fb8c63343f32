"""`sharp-dagster demo` and `sharp-dagster generate`: the sample shop and the main job.

Every value is checked when the arguments are read (`sharp_dagster.cli.args`): `demo` removes the previous demo's
warehouse, job log and Dagster home, and `generate` the previous sample data, only once the whole command line is
known to be good.
"""

from __future__ import annotations

import argparse

from sharp_dagster.cli.args import int_range, iso_date
from sharp_dagster.cli.main import CliError
from sharp_dagster.settings import DEFAULT_START, Settings

# A year of days at most: each demo day is a full pipeline run, each generated day ~100 orders.
DAYS = int_range(1, 366)
# The shop's size: enough for any load test of the sample, not so many that generating it exhausts memory.
USERS = int_range(1, 100_000)
SEED = int_range(0, 2**32 - 1)


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo", help="generate the sample shop (if missing) and materialize every asset, day by day"
    )
    demo.add_argument(
        "--days", type=DAYS, default=3, help="how many days to materialize (default 3, at most 366)"
    )
    demo.add_argument(
        "--start", type=iso_date, default=None, help="first day (default and only choice: the sample's start)"
    )
    demo.add_argument(
        "--users", type=USERS, default=200, help="size of the generated shop (users, 1..100000)"
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the previous demo's state (needs a persistent SHARP_KAFKA_BOOTSTRAP)",
    )
    demo.set_defaults(func=_demo)

    gen = sub.add_parser("generate", help="write the sample shop's snapshot and changes under data/sample")
    gen.add_argument("--days", type=DAYS, default=7, help="days of row changes (default 7, at most 366)")
    gen.add_argument("--users", type=USERS, default=200, help="users (default 200, at most 100000)")
    gen.add_argument("--seed", type=SEED, default=7)
    gen.add_argument("--force", action="store_true", help="rewrite even when the same data is already there")
    gen.set_defaults(func=_generate)


def _demo(args: argparse.Namespace) -> int:
    from sharp_dagster.db import BadDatabaseUrl, check_url
    from sharp_dagster.demo.run import run_demo

    if args.start not in (None, DEFAULT_START):
        raise CliError(f"--start {args.start}: the demo's sample data starts on {DEFAULT_START}")
    try:  # the settings are read, and the job log's URL checked, before the previous demo's state is removed
        check_url(Settings.from_env().log_db_url)
    except (BadDatabaseUrl, ValueError) as exc:
        raise CliError(str(exc)) from None
    result = run_demo(days=args.days, start=args.start, users=args.users, keep=args.keep)
    return 1 if result.failed else 0


def _generate(args: argparse.Namespace) -> int:
    from sharp_dagster.demo.generator import GeneratorConfig, generate

    out = Settings.from_env().sample_dir
    manifest = generate(
        out, GeneratorConfig(seed=args.seed, days=args.days, users=args.users), force=args.force
    )
    print(f"wrote {out / 'shop'}: final rows {manifest['final_rows']}, {manifest['last_seq']} changes")
    return 0
