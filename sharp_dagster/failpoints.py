"""Named fail points of the publish lifecycle, where the fault tests stop or kill a run (as etcd's gofail and
TiKV's fail-rs do): a fault lands at an exact step instead of after a guessed sleep.

`SHARP_FAILPOINTS="after_audit=stop,after_claim=kill"` arms points for one process (a test sets it for the child run
it starts). Actions: `kill` (SIGKILL to itself: no cleanup runs, as with an OOM kill), `stop` (SIGSTOP to itself: the
process freezes until the test sends SIGCONT or SIGKILL), `sleep:<seconds>`, `raise` (an exception, as a bug would).
With the variable unset, `failpoint()` is one dictionary lookup.

The points, in lifecycle order (`publish/materialize.py`, `spark/wap.py`, `cdc/ods/merge.py`):
- `after_claim`: the period is claimed and the upstream gate passed; nothing read yet;
- `mid_write`: the staging branch is cut, the partition's rows (an ODS day's merge) are not committed to it yet;
- `after_audit`: staged and every strong rule passed; not yet fenced or published;
- `after_publish`: the table commit is done; the job log does not yet say SUCCESS.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import AbstractContextManager, nullcontext

from sharp_dagster.settings import FAILPOINTS_ENV, failpoints_spec

ENV = FAILPOINTS_ENV
POINTS = ("after_claim", "mid_write", "after_audit", "after_publish")


class FailpointError(RuntimeError):
    """Raised at a fail point armed with `raise`."""


def armed() -> dict[str, str]:
    """The armed points of this process: `{name: action}`; an unknown point or action is an error naming it."""
    spec = (failpoints_spec() or "").strip()
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if name not in POINTS:
            raise ValueError(f"{ENV}: unknown fail point {name!r} (known: {', '.join(POINTS)})")
        if action not in ("kill", "stop", "raise") and not action.startswith("sleep:"):
            raise ValueError(f"{ENV}: unknown action {action!r} for {name} (kill, stop, raise, sleep:<s>)")
        out[name] = action
    return out


def failpoint(name: str, quiet: AbstractContextManager[object] | None = None) -> None:
    """Act at point `name` when it is armed; otherwise do nothing.

    `quiet`: held while the process is frozen by `stop` (the claim's `Heartbeat.between_beats`), so it freezes
    between two transactions of its background threads, never inside one."""
    if failpoints_spec() is None:
        return
    action = armed().get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "stop":
        with quiet or nullcontext():
            os.kill(os.getpid(), signal.SIGSTOP)
    elif action == "raise":
        raise FailpointError(f"fail point {name}")
    else:
        time.sleep(float(action.split(":", 1)[1]))
