import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from lockcheck import header, snapshot  # noqa: E402

# Tiny models gain nothing from intra-op threads, and two spinning OpenMP threads on a
# 2-core machine that is also running something else make every matmul 100x slower.
torch.set_num_threads(1)


def pytest_configure(config):
    snapshot()  # the install as the session begins, which tests/test_install_lock.py judges


def pytest_report_header(config):
    """Key package versions and whether every installed distribution equals the lock (MISMATCH lists the rest);
    tests/test_install_lock.py fails on a mismatch."""
    return header()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The same two lines at the end when ``-q`` (as ``make test`` runs) hides the header."""
    if config.get_verbosity() < 0:
        for line in header():
            terminalreporter.write_line(line)
