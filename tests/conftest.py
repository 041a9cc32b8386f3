import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

# Tiny models gain nothing from intra-op threads, and two spinning OpenMP threads on a
# 2-core machine that is also running something else make every matmul 100x slower.
torch.set_num_threads(1)
