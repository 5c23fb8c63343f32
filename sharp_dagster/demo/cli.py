"""`sharp-dagster demo` and `sharp-dagster generate`: the sample shop and the main job."""

from __future__ import annotations

import argparse
import re

from sharp_dagster.cli.main import CliError


def _date(value: str) -> str:
    if not re.match(r"^\d{4}-\d{2}-\d{2}$", value):
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {value!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser(
        "demo", help="generate the sample shop (if missing) and materialize every asset, day by day"
    )
    demo.add_argument("--days", type=int, default=3, help="how many days to materialize (default 3)")
    demo.add_argument("--start", type=_date, default=None, help="first day (default: the warehouse's start)")
    demo.add_argument("--users", type=int, default=200, help="size of the generated shop (users)")
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the previous demo's state (needs a persistent SHARP_KAFKA_BOOTSTRAP)",
    )
    demo.set_defaults(func=_demo)

    gen = sub.add_parser("generate", help="write the sample shop's snapshot and changes under data/sample")
    gen.add_argument("--days", type=int, default=7)
    gen.add_argument("--users", type=int, default=200)
    gen.add_argument("--seed", type=int, default=7)
    gen.add_argument("--force", action="store_true", help="rewrite even when the same data is already there")
    gen.set_defaults(func=_generate)


def _demo(args: argparse.Namespace) -> int:
    from sharp_dagster.demo.run import run_demo

    if args.days < 1:
        raise CliError("--days must be at least 1")
    result = run_demo(days=args.days, start=args.start, users=args.users, keep=args.keep)
    return 1 if result.failed else 0


def _generate(args: argparse.Namespace) -> int:
    from sharp_dagster.demo.generator import GeneratorConfig, generate
    from sharp_dagster.settings import Settings

    out = Settings.from_env().sample_dir
    manifest = generate(
        out, GeneratorConfig(seed=args.seed, days=args.days, users=args.users), force=args.force
    )
    print(f"wrote {out / 'shop'}: final rows {manifest['final_rows']}, {manifest['last_seq']} changes")
    return 0
