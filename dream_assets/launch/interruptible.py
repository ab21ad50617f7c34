"""Run a command with SIGINT at its default disposition: ``python -m dream_assets.launch.interruptible PROGRAM ARGS``.

A job started in the background by a shell script inherits SIGINT *ignored*. ``dagster dev`` maps SIGTERM onto
whatever SIGINT does, so started that way it ignores SIGTERM too, and its webserver, daemon and code servers keep
running after a supervisor (or ``kill``) asks it to stop. `make dev` execs it through this, which restores SIGINT's
default first, so SIGTERM and Ctrl-C stop it and everything it started, however it was launched."""

import os
import signal
import sys


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m dream_assets.launch.interruptible PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
