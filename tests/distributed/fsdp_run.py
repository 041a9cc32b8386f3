"""``grpokit train ARGS...`` (see test_fsdp.py); with ``KILL_AT=k`` rank 0 kill -9s itself right after step k's checkpoint.

SIGKILL leaves no chance to clean up: what the resumed run finds is exactly what a crash leaves.
"""

import os
import signal
import sys

from grpokit.cli import main
from grpokit.trainer.loop import Trainer

kill_at = int(os.environ.get("KILL_AT", "0"))
save = Trainer.save


def save_then_die(self):
    path = save(self)
    if self.step == kill_at and self.learners.is_main:
        os.kill(os.getpid(), signal.SIGKILL)
    return path


Trainer.save = save_then_die
sys.exit(main(sys.argv[1:]))
