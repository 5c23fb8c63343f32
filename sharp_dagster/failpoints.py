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
import threading
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
        os.kill(os.getpid(), signal.SIGKILL)  # fatal: every thread of the process ends at once
    elif action == "stop":
        with quiet or nullcontext():
            to_this_thread(signal.SIGSTOP)
    elif action == "raise":
        raise FailpointError(f"fail point {name}")
    else:
        time.sleep(float(action.split(":", 1)[1]))


def to_this_thread(sig: int) -> None:
    """Stop the process at this very line of the calling thread.

    `SIGSTOP` stops the whole process however it is sent, but not at the same moment: sent to the process
    (`os.kill(os.getpid(), ...)`), the kernel hands it to the main thread, and a fail point reached on another
    thread (a table's lifecycle on `assets/ods_source.py`'s pool) runs on until the main thread is scheduled and
    stops the rest. On a busy machine that was far enough to begin the next step's job-log
    transaction: the process froze holding SQLite's write lock, and every other run's write waited 30 s and failed
    with `database is locked`. Sent to this thread (`pthread_kill`), the signal is this thread's own and acts before
    the call returns."""
    signal.pthread_kill(threading.get_ident(), sig)
