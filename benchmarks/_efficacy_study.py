"""Running, caching and reporting the efficacy study of ``benchmarks/efficacy.py`` (its method table lives there).

One JSON per (mode, task, method, seed, budget, code version) under the cache folder, written to
a temporary file and renamed (a killed study never leaves half a record, and a rerun skips every
run whose record exists). A run that fails or a row this code version cannot run is not cached
(it is retried next time); the rows not run are kept in ``not_run__<mode>__<version>.json`` so
``--report-only`` still lists them. KDRL's teacher is a prerequisite run (GRPO, its own seed,
the same budget) whose run folder, with its final checkpoint, is cached under ``teachers/``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULT_TAG = "EFFICACY_RESULT_JSON:"
TEACHER_SEED = 1000  # KDRL's teacher: GRPO with a seed no study row uses [inferred]

log = logging.getLogger("efficacy")


@dataclass
class Plan:
    """One invocation: what to run (from the command line) and the study's tables."""

    mode: str  # "study" or "dry"
    tasks: list[str]
    methods: list[str]
    seeds: list[int]
    budget_min: float
    eval_every: int
    device: str
    cache_dir: Path
    timeout_s: float
    version: str
    sizes: Any  # efficacy.Sizes
    method_table: dict
    task_table: dict
    build_config: Callable  # (method, task, seed, sizes, out_dir, device, teacher) -> grpokit Config
    script: str
    eval_first: int = 0  # also evaluate after each of the first this many steps (time-to-accuracy resolution)


def code_version() -> str:
    """The commit, plus a hash of src/grpokit's files when the checkout differs from it (or 'nogit')."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    sha = git("rev-parse", "--short=7", "HEAD") or "nogit"
    if not git("status", "--porcelain", "--", "src/grpokit"):
        return sha
    digest = hashlib.sha256()
    for path in sorted(p for p in (ROOT / "src" / "grpokit").rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return f"{sha}+{digest.hexdigest()[:8]}"


def run_key(mode: str, task: str, method: str, seed: int, budget: float, version: str) -> str:
    return f"{mode}__{task}__{method}__seed{seed}__{budget:g}min__{version}"


def write_atomic(path: Path, data: dict) -> None:
    """JSON to a temporary file next to ``path``, then renamed onto it: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def load_cached(cache: Path, mode: str, budget: float, version: str) -> dict[str, dict[str, list[dict]]]:
    """Every cached run of this mode, budget and code version: task -> method -> runs, by seed."""
    out: dict[str, dict[str, list[dict]]] = {}
    for path in sorted(cache.glob(f"{mode}__*__{budget:g}min__{version}.json")):
        run = json.loads(path.read_text())
        if run["method"] != "teacher":
            out.setdefault(run["task"], {}).setdefault(run["method"], []).append(run)
    for methods in out.values():
        for runs in methods.values():
            runs.sort(key=lambda r: r["seed"])
    return out


def not_run_path(plan: Plan) -> Path:
    return plan.cache_dir / f"not_run__{plan.mode}__{plan.version}.json"


# ------------------------------------------------------------------------------- children
def child_env(dry_run: bool) -> dict:
    """Offline, unbuffered, and grpokit's MKL-on-AMD shim for both sides (the dry run skips building it)."""
    from step_vs_trl import _mkl_amd_env

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return _mkl_amd_env(env, not dry_run)


def run_child(plan: Plan, spec: dict) -> dict:
    """One run in a fresh process (clean memory and timing): its record, or ``{"failed": reason}``."""
    cmd = [sys.executable, plan.script, "--_child", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=child_env(plan.mode == "dry"), timeout=plan.timeout_s)
    except subprocess.TimeoutExpired:
        return {"failed": f"did not finish within {plan.timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        return {"failed": f"exited {proc.returncode} (its log is above)"}
    return json.loads(lines[-1][len(RESULT_TAG):])


def spec_for(plan: Plan, method: str, task: str, seed: int, out_dir: str, teacher: str | None, save: bool = False) -> dict:
    return {"mode": plan.mode, "method": method, "task": task, "seed": seed, "budget_min": plan.budget_min,
            "eval_every": plan.eval_every, "eval_first": plan.eval_first, "sizes": dataclasses.asdict(plan.sizes), "device": plan.device,
            "out_dir": out_dir, "teacher": teacher, "save": save}


def availability(plan: Plan, method: Any, task: Any, teacher: str | None) -> str | None:
    """Why this code version cannot run ``method`` on ``task`` (one line, from the load-time checks), or None."""
    import importlib.util

    from grpokit.trainer.inputs import check_run

    if method.side == "trl" and importlib.util.find_spec("trl") is None:
        return "TRL is not installed (pip install -e '.[bench]')"
    try:
        cfg = plan.build_config(method, task, 0, plan.sizes, str(plan.cache_dir / "check"), plan.device, teacher)
        check_run(cfg)
        if method.side == "trl":
            from _trl_side import grpo_config_kwargs

            grpo_config_kwargs(cfg)
    except ValueError as e:  # ConfigError, RunContractError, ...: one line naming the field
        return str(e).splitlines()[0]
    return None


def ensure_teacher(plan: Plan, task: str) -> tuple[str | None, str | None]:
    """(KDRL's teacher folder for ``task``, None) — trained once and cached — or (None, why it failed)."""
    key = run_key(plan.mode, task, "teacher", TEACHER_SEED, plan.budget_min, plan.version)
    folder = plan.cache_dir / "teachers" / key
    if folder.is_dir():
        return str(folder), None
    tmp = folder.with_name(f".{key}.{os.getpid()}.tmp")
    log.info("training KDRL's teacher for task %s (GRPO, seed %d, %g min) ...", task, TEACHER_SEED, plan.budget_min)
    record = run_child(plan, spec_for(plan, "grpo", task, TEACHER_SEED, str(tmp), None, save=True))
    if "failed" in record:
        return None, f"its teacher (a GRPO run) failed: {record['failed']}"
    os.replace(tmp, folder)
    write_atomic(plan.cache_dir / f"{key}.json", {**record, "method": "teacher", "out_dir": str(folder)})
    return str(folder), None


def run_study(plan: Plan) -> None:
    """Run every selected (task, method, seed) not cached yet; rows that cannot run are recorded, not cached."""
    path = not_run_path(plan)
    not_run: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    for task in plan.tasks:
        teacher = None
        for name in plan.methods:
            method = plan.method_table[name]
            seeds = plan.seeds[: method.seeds]  # a diagnosis row runs the first of them
            keys = {s: run_key(plan.mode, task, name, s, plan.budget_min, plan.version) for s in seeds}
            todo = [s for s, k in keys.items() if not (plan.cache_dir / f"{k}.json").exists()]
            if len(todo) < len(keys):
                log.info("%s on %s: seed(s) %s cached", name, task, sorted(set(keys) - set(todo)))
            if not todo:
                continue
            why = None
            if method.needs_teacher and teacher is None:
                teacher, why = ensure_teacher(plan, task)
            why = why or availability(plan, method, plan.task_table[task], teacher)
            not_run.pop(f"{task}/{name}", None)
            if why:
                log.warning("%s on %s not run: %s", name, task, why)
                not_run[f"{task}/{name}"] = why
                continue
            for seed in todo:
                log.info("running %s ...", keys[seed])
                t = time.perf_counter()
                with tempfile.TemporaryDirectory(prefix="efficacy-run-") as out_dir:
                    record = run_child(plan, spec_for(plan, name, task, seed, out_dir, teacher))
                if "failed" in record:
                    log.error("%s failed: %s", keys[seed], record["failed"])
                    not_run[f"{task}/{name}"] = f"seed {seed} failed: {record['failed']}"
                    continue
                write_atomic(plan.cache_dir / f"{keys[seed]}.json", {**record, "code_version": plan.version, "ran_on": code_version()})
                log.info("%s done in %.0f s: held-out accuracy %.3f -> %.3f in %d steps", keys[seed], time.perf_counter() - t,
                         record["evals"][0]["accuracy"], record["evals"][-1]["accuracy"], record["n_steps"])
    write_atomic(path, not_run)
