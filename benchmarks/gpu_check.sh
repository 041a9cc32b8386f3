#!/usr/bin/env bash
# One GPU check of grpokit in under 12 minutes: throughput vs TRL, a learning smoke test, gpu_speedup=.
#
#   bash benchmarks/gpu_check.sh              # on the GPU machine, with .gpu_bundle/ carried (gpu_bundle.sh)
#   bash benchmarks/gpu_check.sh --dry-run    # here, on the CPU: same code path, tiny sizes, no install
#   bash benchmarks/gpu_check.sh --presets    # then also every preset's 3-step tiny run on CUDA (pytest)
#
# Without --dry-run it installs .gpu_bundle/wheels offline into a target folder put first on
# PYTHONPATH (the machine's own torch, transformers, peft and accelerate stay as they are), then runs
# benchmarks/gpu_check.py. When src/grpokit/ differs from what the bundled grpokit wheel was built
# from, the checkout's src/ is used instead (the working tree travels with every run) and this says
# so. The last line is always `gpu_speedup=<TRL s/step / grpokit s/step>` (nan without TRL).
# --presets: after the check, tests/trainer/test_presets.py runs with GRPOKIT_TEST_DEVICE=cuda (every
# preset trains its family's tiny random model 3 steps on the GPU, no tensor created off the data's
# device, the policy asserted on CUDA), limited to PRESETS_TIMEOUT seconds (default 150); its summary
# then follows the gpu_speedup line, and the exit status is the worse of the two. Extra arguments go to gpu_check.py. PYTHON picks the interpreter (default: .venv/bin/python when
# there is one, else python3); GPU_CHECK_SITE the install folder (default /tmp/grpokit-gpu-site).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DRY=0
PRESETS=0
ARGS=()
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY=1 ;;
        --presets) PRESETS=1 ;;
        *) ARGS+=("$arg") ;;
    esac
done
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if [ "$DRY" = 1 ] && [ "$PRESETS" = 1 ]; then
    echo "gpu_check: --presets runs on CUDA only; on the CPU run 'pytest tests/trainer/test_presets.py' instead of --dry-run --presets" >&2
    exit 2
fi
if [ "$DRY" = 1 ]; then
    exec "$PYTHON" benchmarks/gpu_check.py --dry-run ${ARGS[@]+"${ARGS[@]}"}
fi

BUNDLE="$ROOT/.gpu_bundle"
SITE="${GPU_CHECK_SITE:-/tmp/grpokit-gpu-site}"
if ! ls "$BUNDLE"/wheels/*.whl >/dev/null 2>&1; then
    echo "gpu_check: no wheels in $BUNDLE/wheels: run 'bash benchmarks/gpu_bundle.sh' here and carry .gpu_bundle" >&2
    echo "gpu_speedup=nan"
    exit 1
fi
# one name per distribution: pip picks the wheel whose tags fit this Python (multiprocess has one per version)
names="$(ls "$BUNDLE"/wheels/*.whl | sed 's|.*/||; s|-.*||' | sort -u | tr '\n' ' ')"
echo "gpu_check: installing $names from $BUNDLE/wheels into $SITE (offline, no deps)" >&2
# shellcheck disable=SC2086
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    --find-links "$BUNDLE/wheels" $names
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

here_sha="$(find src/grpokit -type f ! -path '*__pycache__*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum |
    sha256sum | cut -d' ' -f1)"
if [ -d src/grpokit ] && [ "$here_sha" != "$(cat "$BUNDLE/SOURCE_SHA" 2>/dev/null)" ]; then
    echo "gpu_check: src/grpokit differs from the bundled grpokit wheel's source: using the checkout's src/" >&2
    export PYTHONPATH="$ROOT/src:$PYTHONPATH"
fi
"$PYTHON" - <<'EOF' >&2
import importlib.metadata as m
import torch
names = ["torch", "transformers", "tokenizers", "peft", "accelerate", "trl", "datasets", "grpokit"]
versions = []
for n in names:
    try:
        versions.append(f"{n} {m.version(n)}")
    except m.PackageNotFoundError:
        versions.append(f"{n} missing")
import grpokit
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print("gpu_check:", ", ".join(versions), "| grpokit from", grpokit.__path__[0], "|", gpu)
EOF
rc=0
"$PYTHON" benchmarks/gpu_check.py --bundle "$BUNDLE" ${ARGS[@]+"${ARGS[@]}"} || rc=$?
if [ "$PRESETS" = 1 ]; then
    echo "gpu_check: every preset's tiny 3-step run on CUDA (tests/trainer/test_presets.py)" >&2
    prc=0
    GRPOKIT_TEST_DEVICE=cuda timeout "${PRESETS_TIMEOUT:-150}" "$PYTHON" -m pytest tests/trainer/test_presets.py -q \
        -p no:cacheprovider -rf --tb=line || prc=$?
    [ "$prc" = 0 ] || rc=$prc
fi
exit "$rc"
