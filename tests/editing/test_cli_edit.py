"""`grpokit edit`: one command for the pipeline; bad edit sets fail in one line before any model loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpokit.cli import main
from grpokit.editing.facts import make_facts, write_jsonl
from grpokit.testing import save_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def test_contradictory_facts_file_is_one_line_error(tmp_path, capsys):
    edits = make_facts(3, seed=0)
    edits[2].subject, edits[2].relation, edits[2].prompt = edits[0].subject, edits[0].relation, "Which job does X have?"
    path = write_jsonl(edits, tmp_path / "bad.jsonl")
    assert main(["edit", "--facts-file", str(path), "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cases 0 and 2" in err and ("contradictory" in err or "duplicate" in err)


def test_bad_layers_and_bad_grpo_override_fail_before_loading(tmp_path, capsys):
    assert main(["edit", "--facts", "2", "--layers", "4,x", "--model", "no-such-model"]) == 2
    assert "--layers" in capsys.readouterr().err
    assert main(["edit", "--facts", "2", "--set", "rollout.group_size=1", "--model", "no-such-model"]) == 2
    assert "group_size" in capsys.readouterr().err


def test_edit_stage_only_on_the_tiny_model(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["edit", "--facts", "2", "--model", save_tiny_model(tmp_path / "tiny"), "--layers", "0,1", "--steps", "2",
                 "--out", str(out), "--no-consolidate"])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert list(result["stages"]) == ["pre-edit", "tpsft"]
    assert result["stages"]["pre-edit"]["direct"]["locality"] == 1.0 and len(result["edits"]) == 2
    assert "| tpsft |" in capsys.readouterr().out


@pytest.mark.slow
def test_benchmark_dry_run_runs_all_three_arms(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/etcon.py", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert "sft_direct_rel=" in last and "tpsft_grpo_cot_loc=" in last


def test_format_steps_needs_the_consolidation_stage(capsys):
    assert main(["edit", "--facts", "2", "--format-steps", "2", "--no-consolidate", "--model", "no-such-model"]) == 2
    assert "--format-steps" in capsys.readouterr().err


def test_format_warmup_trains_on_the_demonstrations_and_returns_a_loadable_model(tmp_path):
    from grpokit.editing.pipeline import format_warmup, save_model
    from grpokit.model.loading import load_model
    from grpokit.testing import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    folder = format_warmup(save_model(model, tokenizer, tmp_path / "edited"), make_facts(3, seed=0), tmp_path, steps=2)
    rows = [json.loads(x) for x in (tmp_path / "format_demonstrations.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all("\\boxed{" in r["completion"] for r in rows)
    warmed, _ = load_model(str(folder))
    changed = [k for k, v in warmed.state_dict().items() if k in before and not torch.equal(v, before[k])]
    assert changed  # the SFT steps moved the weights


def test_whole_pipeline_with_the_format_warmup_reports_each_stage_as_its_row(tmp_path):
    out = tmp_path / "run"
    grpo = ["train.steps=1", "rollout.group_size=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "eval.before=false",
            "eval.after=false", "logging.progress=false", "train.micro_batch_size=4"]
    code = main(["edit", "--facts", "2", "--model", save_tiny_model(tmp_path / "tiny"), "--layers", "0,1", "--steps", "1",
                 "--out", str(out), "--format-steps", "1", *[x for kv in grpo for x in ("--set", kv)]])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert list(result["stages"]) == ["pre-edit", "tpsft", "tpsft+format", "tpsft+format+grpo"]
    assert set(result["minutes"]) >= {"edit", "format", "grpo"}
    assert "format_sft" in (out / "grpo" / "config.yaml").read_text()  # GRPO started from the warm-up's model, not the edited one
