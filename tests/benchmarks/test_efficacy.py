"""benchmarks/efficacy.py: its statistics by hand, the shared task's settings, and the whole study path in --dry-run."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _efficacy_stats as st  # noqa: E402
import efficacy  # noqa: E402

HAS_TRL = importlib.util.find_spec("trl") is not None


def run(minutes, accuracies, steps=None):
    """A run record with evaluations at ``minutes`` (steps 0, 1, 2, ... unless given)."""
    steps = steps or list(range(len(minutes)))
    evals = [{"step": s, "minutes": m, "accuracy": a} for s, m, a in zip(steps, minutes, accuracies)]
    return {"evals": evals, "steps": [], "train_minutes": minutes[-1], "n_steps": steps[-1]}


# ------------------------------------------------------------------------------- statistics
def test_mean_curve_is_exact_at_the_union_of_points_and_holds_final_values_against_minutes():
    a, b = ([0.0, 1.0, 2.0], [0.5, 0.7, 0.9]), ([0.0, 1.5], [0.5, 0.8])
    xs, mean, std = st.mean_curve([a, b], hold=True)
    # x = 1: a 0.7, b 0.5 + 0.3 * 1/1.5 = 0.7; x = 1.5: a 0.7 + 0.2 * 0.5 = 0.8, b 0.8;
    # x = 2: a 0.9, b holds 0.8 -> 0.85, sample std sqrt(2 * 0.05^2 / 1) = 0.0707107
    assert xs == [0.0, 1.0, 1.5, 2.0]
    assert mean == pytest.approx([0.5, 0.7, 0.8, 0.85], abs=1e-12)
    assert std[-1] == pytest.approx(0.05 * math.sqrt(2), abs=1e-12)
    xs, mean, _ = st.mean_curve([a, b], hold=False)  # against steps: up to the shortest curve only
    assert xs == [0.0, 1.0, 1.5] and mean == pytest.approx([0.5, 0.7, 0.8], abs=1e-12)


def test_first_reach_interpolates_inside_the_crossing_segment():
    # 0.75 lies between 0.7 (x = 1) and 0.8 (x = 1.5): 1 + 0.5 * 0.05 / 0.1 = 1.25
    assert st.first_reach([0.0, 1.0, 1.5, 2.0], [0.5, 0.7, 0.8, 0.85], 0.75) == pytest.approx(1.25, abs=1e-12)
    assert st.first_reach([0.0, 1.0], [0.5, 0.7], 0.75) is None
    assert st.first_reach([0.0, 1.0], [0.8, 0.7], 0.75) == 0.0


def test_time_to_trl_accuracy_ratio_by_hand():
    # TRL finals 0.9 and 0.8 -> target 0.85. TRL's mean curve: at 3 min (0.825 + 0.8) / 2 = 0.8125, at 4 min
    # (0.9 + 0.8 held) / 2 = 0.85 -> reached at 4.0. grpokit's: 0.6 -> (1.0 + 0.8) / 2 = 0.9 over [0, 2]:
    # reached at 2 * 0.25 / 0.3 = 1.6667 -> ratio 4 / 1.6667 = 2.4
    trl = [run([0.0, 4.0], [0.6, 0.9]), run([0.0, 3.0], [0.6, 0.8])]
    grpo = [run([0.0, 2.0], [0.6, 1.0]), run([0.0, 2.0], [0.6, 0.8])]
    ratio, why = st.time_to_trl_accuracy_ratio(grpo, trl)
    assert ratio == pytest.approx(2.4, abs=1e-9), why
    # grpokit peaking at (0.8 + 0.8) / 2 = 0.8 never reaches 0.85: nan and the reason
    ratio, why = st.time_to_trl_accuracy_ratio([run([0.0, 2.0], [0.6, 0.8])] * 2, trl)
    assert math.isnan(ratio) and "never reaches" in why and "80.0%" in why
    assert math.isnan(st.time_to_trl_accuracy_ratio(grpo, [])[0])


def test_stays_above_trl_after_reaching_its_final_accuracy_by_hand():
    # TRL: one seed 0.6 -> 0.8 at 4 min (target 0.8). grpokit: 0.6 -> 0.9 at 1 min -> 0.7 at 2 min -> 0.9 at 3 min.
    # grpokit first reaches 0.8 at 2/3 min; points from there: 1 (0.9 vs 0.65), 2 (0.7 vs 0.7), 3 (0.9 vs 0.75),
    # 4 (0.9 held vs 0.8): never below (the tie at 2 min counts as not below), lowest margin 0 at 2 min
    trl = [run([0.0, 4.0], [0.6, 0.8])]
    grpo = [run([0.0, 1.0, 2.0, 3.0], [0.6, 0.9, 0.7, 0.9])]
    holds, where = st.stays_above_trl(grpo, trl)
    assert holds is True and "+0.0 pp at 2.00 min" in where and "4 evaluation minutes from 0.67 min" in where, where
    # a dip to 0.6 at 2 min: 0.6 < 0.7 -> below at one point, lowest margin -10 pp there
    holds, where = st.stays_above_trl([run([0.0, 1.0, 2.0, 3.0], [0.6, 0.9, 0.6, 0.9])], trl)
    assert holds is False and "below TRL at 1 of 4 evaluation minutes from 0.67 min" in where and "-10.0 pp at 2.00 min" in where, where
    assert st.stays_above_trl([run([0.0, 1.0], [0.6, 0.7])], trl)[0] is None  # never reaches 0.8
    assert st.stays_above_trl(grpo, [])[0] is None


def test_compare_at_equal_minutes_and_the_two_standard_error_verdict():
    # equal minute = the shortest run, 1.0: method 0.5 + 0.4 / 2 = 0.7 and 0.5 + 0.2 / 2 = 0.6 (mean 0.65,
    # std 0.0707); reference 0.6, 0.6 (std 0). delta 0.05, SE sqrt(0.005 / 2 + 0) = 0.05
    a = [run([0.0, 2.0], [0.5, 0.9]), run([0.0, 2.0], [0.5, 0.7])]
    b = [run([0.0, 1.0], [0.5, 0.6]), run([0.0, 1.0], [0.5, 0.6])]
    cmp = st.compare(a, b, window=0.0)  # the single evaluation at the equal minute
    assert cmp["minutes"] == 1.0
    assert (cmp["a"], cmp["b"], cmp["delta"], cmp["se"]) == pytest.approx((0.65, 0.6, 0.05, 0.05), abs=1e-12)
    assert st.verdict("better", cmp).startswith("not shown")  # 0.05 < 2 SE = 0.1
    # a match needs a margin; low end 0.05 - 0.1 = -0.05: within a margin of 0.06, beyond one of 0.04
    assert st.verdict("match", cmp).startswith("no verdict (no margin")
    assert st.verdict("match", cmp, margin=0.06).startswith("shown")
    assert st.verdict("match", cmp, margin=0.04).startswith("not shown (the 2-SE interval reaches -5.0 pp")
    assert st.verdict("match", {**cmp, "delta": -0.15}, margin=1.0).startswith("contradicted")
    assert st.verdict("better", {**cmp, "delta": -0.15}).startswith("contradicted")
    # a claimed gain over the start that is a loss beyond 2 SE (TTRL on `hard`) is contradicted, not "within 2 SE"
    assert st.verdict("gain", {**cmp, "delta": -0.15}).startswith("contradicted")
    assert st.verdict("gain", {**cmp, "delta": -0.05}).startswith("not shown (within")
    assert st.verdict("better", st.compare(a[:1], b)).startswith("no verdict")
    # against its own start (paired): gains 0.4 and 0.2 -> mean 0.3, SE 0.1414 / sqrt(2) = 0.1
    gain = st.compare(a, None, window=0.0)
    assert (gain["delta"], gain["se"]) == pytest.approx((0.3, 0.1), abs=1e-12)
    assert st.verdict("gain", gain).startswith("shown")
    # the margin is half the reference's gain at its lower 2-SE bound: 0.5 * (0.3 - 0.2) = 0.05; none below 0
    assert st.non_inferiority_margin(gain) == pytest.approx(0.05, abs=1e-12)
    assert st.non_inferiority_margin({**gain, "delta": 0.1}) == 0.0
    assert st.non_inferiority_margin(st.compare(a[:1], None)) is None


def test_the_verdict_reads_the_mean_of_the_evaluations_in_the_last_fifth_of_the_minutes():
    # a zig-zag averages out: evaluations in [8, 10) at 8, 8.5, 9, 9.5 (0.4 0.6 0.4 0.6) and the end (0.6) -> 0.52
    zig = run([0.0, 8.0, 8.5, 9.0, 9.5, 10.0], [0.2, 0.4, 0.6, 0.4, 0.6, 0.6])
    assert st.window_mean(*st.minutes_curve(zig), 8.0, 10.0) == pytest.approx(0.52, abs=1e-12)
    assert st.window_mean(*st.minutes_curve(zig), 10.0, 10.0) == 0.6
    # no evaluation inside the window: the value at its end (a run evaluated only before and after)
    assert st.window_mean([0.0, 10.0], [0.5, 0.7], 8.0, 10.0) == 0.7
    # equal minute 10, window [8, 10]: method 0.52 and (0.5 + 0.7) / 2 = 0.6 (mean 0.56); reference 0.5 and 0.4
    # (their ends alone, mean 0.45). delta 0.11; SE sqrt(0.0032 / 2 + 0.005 / 2) = sqrt(0.0041)
    a = [zig, run([0.0, 9.0, 10.0], [0.2, 0.5, 0.7])]
    b = [run([0.0, 10.0], [0.2, 0.5]), run([0.0, 10.0], [0.2, 0.4])]
    cmp = st.compare(a, b)
    assert (cmp["window"], cmp["minutes"], cmp["a"], cmp["b"], cmp["delta"]) == pytest.approx((0.2, 10.0, 0.56, 0.45, 0.11), abs=1e-12)
    assert cmp["se"] == pytest.approx(0.0041 ** 0.5, abs=1e-12)
    assert (cmp["a_end"], cmp["b_end"], cmp["delta_end"]) == pytest.approx((0.65, 0.45, 0.2), abs=1e-12)
    # against its own start: the window of its own minutes minus before (0.2): gains 0.32 and 0.4
    gain = st.compare(a, None)
    assert (gain["a"], gain["delta"], gain["a_end"], gain["delta_end"]) == pytest.approx((0.56, 0.36, 0.65, 0.45), abs=1e-12)


# ------------------------------------------------------------------------------- the shared task
def test_the_demo_task_is_trls_reference_task_on_both_sides():
    from _trl_side import grpo_config_kwargs

    cfg = efficacy.build_config(efficacy.METHODS["trl"], efficacy.TASKS["demo"], 3, efficacy.STUDY, "/tmp/x", "cpu")
    d, r, o, a = cfg.data, cfg.rollout, cfg.optim, cfg.algorithm
    assert d.task_options["template"] == "What is {a} {op} {b}? Answer with just the number." and d.system_prompt is None
    assert (d.n_train, d.n_heldout, d.seed, r.group_size, r.prompts_per_step, r.max_new_tokens, r.temperature) == (55, 200, 0, 8, 4, 32, 0.8)
    assert (o.lr, o.schedule, o.warmup_steps, a.aggregation, a.beta, cfg.model.lora.enabled, cfg.train.seed) == (
        2e-5, "constant", 2, "token_mean", 0.0, False, 3)
    trl = grpo_config_kwargs(cfg)
    assert {k: trl[k] for k in ("loss_type", "lr_scheduler_type", "warmup_steps", "beta", "epsilon", "epsilon_high",
                                "num_generations", "max_completion_length", "temperature", "scale_rewards", "seed")} == {
        "loss_type": "dapo", "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 2, "beta": 0.0, "epsilon": 0.2,
        "epsilon_high": 0.2, "num_generations": 8, "max_completion_length": 32, "temperature": 0.8,
        "scale_rewards": "group", "seed": 3}
    dapo = efficacy.build_config(efficacy.METHODS["dapo"], efficacy.TASKS["demo"], 0, efficacy.STUDY, "/tmp/x", "cpu")
    with pytest.raises(ValueError, match="algorithm.dynamic_sampling"):
        grpo_config_kwargs(dapo)  # TRL has no dynamic sampling: refused, never silently another method


@pytest.mark.skipif(not HAS_TRL, reason="TRL (the bench extra) is not installed")
def test_trl_sees_the_prompt_text_grpokit_renders():
    from trl.data_utils import maybe_apply_chat_template

    from _trl_side import trl_dataset
    from grpokit.data.chat import render_prompt
    from grpokit.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    row = {"prompt": "What is 3 + 4? Answer with just the number.", "answer": "7"}
    trl_row = trl_dataset([row], None)[0]
    assert maybe_apply_chat_template(trl_row, tok)["prompt"] == render_prompt(tok, row["prompt"], None)
    assert trl_row["answer"] == "7"


def test_every_row_of_the_method_table_loads_at_this_code_version():
    from grpokit.trainer.inputs import check_run

    for m in efficacy.METHODS.values():
        assert m.ref in efficacy.METHODS or m.ref == "before", m.name
        assert not m.claim or "arXiv " in m.paper, m.name  # title + arXiv id for every claim
        teacher = str(ROOT / "tests") if m.needs_teacher else None  # any folder that is not the student's model
        cfg = efficacy.build_config(m, efficacy.TASKS["demo"], 0, efficacy.STUDY, "/tmp/x", "cpu", teacher)
        if not m.needs_teacher:
            check_run(cfg)
        assert (cfg.rollout.temperature, cfg.optim.lr, cfg.data.n_train) == (0.8, 2e-5, 55), m.name  # the task's, not the preset's


def test_online_rows_update_once_per_generation_and_offline_rows_more():
    """An "online" row must stay on-policy whatever its preset's structure: humanline_online set only num_iterations=1,
    and when the preset took 4 mini-batches per generation (2026-12-05) it became the offline row (caught 2026-12-06)."""
    def updates(name):
        return efficacy.build_config(efficacy.METHODS[name], efficacy.TASKS["hard"], 0, efficacy.STUDY, "/tmp/x", "cpu").algorithm.updates_per_batch

    online = [m for m in efficacy.METHODS if m.endswith("_online")]
    assert online and all(updates(m) == 1 for m in online)
    assert all(updates(m) > 1 for m in efficacy.METHODS if m.endswith("_offline"))
    assert updates("grpo") == 1


def test_probe_scores_a_candidate_task_with_its_own_reward_and_judge(tmp_path):
    import dataclasses

    import _efficacy_child as child
    from grpokit.testing import tiny_model_and_tokenizer

    sizes = dataclasses.replace(efficacy.DRY, model=str(tmp_path))
    countdown = efficacy.PROBE_TASKS["countdown3"]
    cfg = efficacy.build_config(efficacy.METHODS["grpo"], countdown, 0, sizes, str(tmp_path), "cpu")
    assert [r.name for r in cfg.rewards] == ["countdown_equation"] and cfg.eval.accuracy_reward == "countdown_equation"
    assert cfg.data.task_options == {"num_count": 3, "max_number": 9}  # the demo's arithmetic options replaced whole
    result = child.probe_task(*tiny_model_and_tokenizer(seed=0), cfg)
    assert result["n"] == 16 and 0.0 <= result["accuracy"] <= 1.0
    with pytest.raises(ValueError, match="label-free"):  # no majority-vote answer on countdown
        efficacy.build_config(efficacy.METHODS["ttrl"], countdown, 0, sizes, str(tmp_path), "cpu")


# ------------------------------------------------------------------------------- the whole path
def study(tmp_path, *args):
    cmd = [sys.executable, "benchmarks/efficacy.py", "--dry-run", "--tasks", "demo", "--budget-min", "5",
           "--code-version", "test", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "docs"), *args]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert re.fullmatch(r"time_to_trl_accuracy_ratio=(nan|\d+\.\d{3})", proc.stdout.strip().splitlines()[-1]), proc.stdout
    return proc


def test_dry_run_study_trains_caches_resumes_and_reports(tmp_path):
    study(tmp_path, "--methods", "grpo,trl,kdrl", "--seeds", "0")
    cache = tmp_path / "cache"
    runs = {m: json.loads((cache / f"dry__demo__{m}__seed0__5min__test.json").read_text())
            for m in ("grpo", "kdrl") + (("trl",) if HAS_TRL else ())}
    # KDRL's teacher: a GRPO run folder with its final checkpoint, cached once
    assert list((cache / "teachers" / "dry__demo__teacher__seed1000__5min__test" / "checkpoints").glob("step-6"))
    for name, r in runs.items():
        # the 6-step cap ends the run (the 5-minute budget does not): evaluations at 0, 2, 4, 6
        assert [e["step"] for e in r["evals"]] == [0, 2, 4, 6] and r["n_steps"] == 6, name
        minutes = [s["minutes"] for s in r["steps"]]
        assert minutes == sorted(minutes) and 0 < minutes[0] and minutes[-1] < 5, name
        assert [e["minutes"] for e in r["evals"][1:]] == [minutes[1], minutes[3], minutes[5]], name
        assert all(s["completion_len"] is not None and s["zero_var_frac"] is not None for s in r["steps"]), name
    # grpokit's steps record the optimizer updates applied (0 on an all-tied batch) and the clipped token fraction
    assert all(s["updates"] in (0.0, 1.0) and "clip_frac" in s for s in runs["grpo"]["steps"])
    assert all((s["updates"] == 0.0) == (s["grad_norm"] == 0.0) for s in runs["grpo"]["steps"])
    # the learning rate each step used: both warm up as (step + 1) / 3 x 2e-5 (TRL's HF constant_with_warmup would
    # give step / 2: lr 0 on its first step)
    assert [s["lr"] for s in runs["grpo"]["steps"][:3]] == pytest.approx([2e-5 / 3, 4e-5 / 3, 2e-5], rel=1e-6)
    if HAS_TRL:
        assert [s["lr"] for s in runs["trl"]["steps"][:3]] == pytest.approx([2e-5 / 3, 4e-5 / 3, 2e-5], rel=1e-6)
    # a rerun finds everything cached and runs nothing
    again = study(tmp_path, "--methods", "grpo,trl,kdrl", "--seeds", "0")
    assert "running " not in again.stderr and "seed(s) [0] cached" in again.stderr
    # --report-only regenerates the report and its figures from the cache
    doc = tmp_path / "docs" / "efficacy.md"
    doc.unlink()
    study(tmp_path, "--report-only")
    text = doc.read_text()
    assert "| GRPO | 1 |" in text and "| KDRL | 1 |" in text and "time_to_trl_accuracy_ratio=" in text
    assert "## Task `demo`" in text and "## Task `hard`" not in text  # --tasks: the report holds those tasks only
    assert ("| TRL GRPOTrainer (GRPO) | 1 |" in text) == HAS_TRL
    assert "**DAPO** (DAPO: An Open-Source LLM Reinforcement Learning System at Scale, arXiv 2503.14476)" in text
    for name in ("demo_grpo_vs_trl.png", "demo_methods.png", "demo_diagnostics.png"):
        assert (tmp_path / "docs" / "efficacy" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # --into-kept: this version's tasks as one kept section beside the report's own, which stays as it was
    study(tmp_path, "--report-only", "--into-kept", "study_test")
    merged = doc.read_text()
    assert merged.startswith(text.rstrip("\n")) and "<!-- kept:start:study_test -->" in merged
    kept = merged[merged.index("<!-- kept:start:study_test -->"):]
    assert "## Study at code `test`, 5 training minutes per run" in kept and "\n### Task `demo`" in kept and "\n## Task" not in kept
    assert "| GRPO | 1 |" in kept and "(efficacy/demo_grpo_vs_trl_test.png)" in kept
    assert (tmp_path / "docs" / "efficacy" / "demo_grpo_vs_trl_test.png").is_file()
    assert "### Rows still to run" in kept and "`grpo` 1, `trl` " in kept and "`dapo` 0" in kept  # 1 of 3 seeds run
    study(tmp_path, "--report-only")  # a regenerated report keeps it
    assert "<!-- kept:start:study_test -->" in doc.read_text()


def test_regenerating_the_report_keeps_the_sections_other_benchmarks_wrote(tmp_path):
    import _efficacy_report as rep

    path = tmp_path / "efficacy.md"
    path.write_text("# old\n")
    rep.write_kept(path, "vision", ["## Vision", "| papo | 1 |"])
    rep.write_kept(path, "flow", ["## Flow", "| win-rate | 2 |"])
    rep.write_kept(path, "vision", ["## Vision", "| papo | 3 |"])  # replaced in place, the other kept
    rep.write_markdown(path, ["# new", ""], [["## Task", ""]], {})
    text = path.read_text()
    assert text.startswith("# new") and "# old" not in text and "| papo | 1 |" not in text
    assert text.index("| papo | 3 |") < text.index("| win-rate | 2 |")
    assert text.count("<!-- kept:start:vision -->") == 1 and text.count("<!-- kept:end:flow -->") == 1


def test_a_diagnosis_row_is_pending_for_its_one_seed_only():
    from types import SimpleNamespace

    plan = SimpleNamespace(tasks=["hard"], methods=list(efficacy.METHODS))
    full = {name: [{}] * 3 for name in efficacy.METHODS}
    assert efficacy.pending(plan, {"hard": full}) == []
    assert efficacy.METHODS["disco_free"].seeds == 1 and efficacy.METHODS["disco"].seeds == 3
    one_each = {"hard": {**full, "disco_free": [{}], "disco": [{}]}}
    assert "`disco` 1" in efficacy.pending(plan, one_each)[0] and "disco_free" not in efficacy.pending(plan, one_each)[0]
    assert "`disco_free` 0" in efficacy.pending(plan, {"hard": {**full, "disco_free": []}})[0]
    # a study of some rows (--methods) is pending on those rows only
    pair = SimpleNamespace(tasks=["demo"], methods=["grpo_overlong", "trl_overlong"])
    assert efficacy.pending(pair, {"demo": {"grpo_overlong": [{}] * 3, "trl_overlong": [{}] * 3}}) == []
    assert efficacy.pending(pair, {"demo": {"grpo_overlong": [{}] * 3}}) == [
        "- `demo`: `trl_overlong` 0 (of 3 seeds; the study resumes where it stopped)"]


def test_the_claim_table_holds_the_seeded_rows_and_the_one_seed_diagnoses_get_their_own():
    import _efficacy_report as rep

    task = efficacy.TASKS["hard"]
    step = {"completion_len": 10.0, "zero_var_frac": 0.5, "skipped_rows": 0.0}
    three = [{**run([0.0, 1.0], [0.25, 0.5 + k / 100]), "steps": [step, step]} for k in range(3)]
    runs = {"grpo": three, "disco": three, "disco_free": three[:1]}
    lines = rep.task_section(task, runs, list(efficacy.METHODS.values()), [])
    claim_table = lines[lines.index(next(l for l in lines if l.startswith("| method"))):]
    claim_table = claim_table[:claim_table.index("")]
    labels = ["| " + efficacy.METHODS[name].label for name in ("grpo", "disco")]
    assert [l.split(" | ")[0] for l in claim_table[2:]] == labels  # 3 seeds each, no diagnosis row
    at = next(i for i, l in enumerate(lines) if l.startswith("Diagnosis runs"))
    assert lines[at + 4].startswith("| " + efficacy.METHODS["disco_free"].label + " | 1 |")
    assert at > lines.index(claim_table[-1])


def test_the_study_evaluates_every_n_steps_and_after_each_of_the_first_ones():
    import _efficacy_child as child

    assert [s for s in range(1, 13) if child.evaluates_at(s, 5, 0)] == [5, 10]
    assert [s for s in range(1, 13) if child.evaluates_at(s, 5, 3)] == [1, 2, 3, 5, 10]
    with pytest.raises(SystemExit, match="--eval-first must be >= 0"):
        efficacy.make_plan(efficacy.parse_args(["--eval-first", "-1"]))
    with pytest.raises(SystemExit, match="--eval-every must be >= 1"):
        efficacy.make_plan(efficacy.parse_args(["--eval-every", "0"]))
    # the report names each rate in numeric order, with its rows
    from types import SimpleNamespace

    results = {"demo": {"grpo": [{"eval_every": 10}], "trl": [{"eval_every": 5, "eval_first": 5}]}}
    assert efficacy.eval_schedule(SimpleNamespace(eval_every=5, eval_first=0), results) == (
        "every 5 steps and after each of the first 5 for TRL GRPOTrainer (GRPO) (demo); every 10 steps for GRPO (demo)")


def test_the_overlong_pair_masks_truncated_completions_on_both_sides_and_nothing_else_differs():
    from _trl_side import grpo_config_kwargs

    def cfg(name):
        return efficacy.build_config(efficacy.METHODS[name], efficacy.TASKS["demo"], 0, efficacy.STUDY, "/tmp/x", "cpu")

    plain, masked = cfg("grpo"), cfg("grpo_overlong")
    assert (plain.algorithm.mask_truncated, masked.algorithm.mask_truncated) == (False, True)
    assert {**vars(masked.algorithm), "mask_truncated": False} == vars(plain.algorithm)
    assert efficacy.METHODS["trl_overlong"].side == "trl" and efficacy.METHODS["trl_overlong"].sets == efficacy.METHODS["grpo_overlong"].sets
    assert grpo_config_kwargs(cfg("trl_overlong"))["mask_truncated_completions"] is True
    assert grpo_config_kwargs(cfg("trl"))["mask_truncated_completions"] is False


def test_each_trl_pair_gets_its_own_comparison_and_figure():
    import _efficacy_report as rep

    assert [rep.pair_of(s, "demo") for s in ("demo_grpo_vs_trl", "demo_grpo_vs_trl_abc1234", "demo_grpo_vs_trl_overlong",
                                             "demo_grpo_vs_trl_overlong_abc1234", "demo_methods", "hard_grpo_vs_trl")] == [
        "", "", "_overlong", "_overlong", None, None]
    step = {"completion_len": 10.0, "zero_var_frac": 0.5, "skipped_rows": 0.0}
    three = [{**run([0.0, 1.0, 2.0], [0.5, 0.8, 0.8 + k / 100]), "steps": [step] * 2} for k in range(3)]
    slow = [{**run([0.0, 4.0, 8.0], [0.5, 0.7, 0.75]), "steps": [step] * 2} for _ in range(3)]
    figures = [f"/x/demo_grpo_vs_trl{s}.png" for s in ("", "_overlong")] + ["/x/demo_methods.png"]
    lines = rep.task_section(efficacy.TASKS["demo"], {"grpo": three, "trl": slow, "grpo_overlong": three, "trl_overlong": slow},
                             list(efficacy.METHODS.values()), figures)
    heads = [i for i, line in enumerate(lines) if line.startswith("### GRPO (grpokit) and TRL")]
    assert len(heads) == 2 and "with overlong filtering" in lines[heads[1]]
    # TRL reaches its final 75% at 8 min (linear from 70% at 4), grpokit at 0.25/0.3 x 1 min: ratio 8 / (0.25 / 0.3)
    assert lines[heads[0] + 2] == lines[heads[1] + 2] == "`time_to_trl_accuracy_ratio=9.600`"
    first, second = "\n".join(lines[heads[0]:heads[1]]), "\n".join(lines[heads[1]:])
    assert "(efficacy/demo_grpo_vs_trl.png)" in first and "_overlong.png" not in first
    assert "(efficacy/demo_grpo_vs_trl_overlong.png)" in second and "(efficacy/demo_methods.png)" in second
    only_plain = rep.task_section(efficacy.TASKS["demo"], {"grpo": three, "trl": slow}, list(efficacy.METHODS.values()), figures)
    assert sum(line.startswith("### GRPO (grpokit) and TRL") for line in only_plain) == 1
