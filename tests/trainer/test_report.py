"""Tests for grpokit.trainer.report on synthetic run directories."""

from __future__ import annotations

import json

import pytest

from grpokit.trainer.report import (
    ReportError,
    before_after,
    moving_average,
    read_jsonl,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _metrics(steps=20):
    return [
        {
            "step": s,
            "reward/mean": 0.5 + 0.02 * s,
            "reward/correct/mean": 0.4 + 0.02 * s,
            "kl": 0.001 * s,
            "completion_len/mean": 20.0,
            "time/step_s": 2.0,
            "time/elapsed_s": 2.0 * s,
        }
        for s in range(1, steps + 1)
    ]


@pytest.fixture
def run_dir(tmp_path):
    _write_jsonl(tmp_path / "metrics.jsonl", _metrics())
    _write_jsonl(
        tmp_path / "eval.jsonl",
        [
            {"step": 0, "accuracy": 0.70, "n": 200, "split": "heldout", "label": "before"},
            {"step": 10, "accuracy": 0.80, "n": 200, "split": "heldout"},
            {"step": 20, "accuracy": 0.85, "n": 200, "split": "heldout", "label": "after"},
        ],
    )
    (tmp_path / "config.yaml").write_text("model: smollm2-135m-instruct\nlr: 2.0e-5\n")
    return tmp_path


def test_report_files_and_pngs(run_dir):
    report = write_report(run_dir)
    assert report == run_dir / "report.md"
    for name in ("reward.png", "accuracy.png"):
        data = (run_dir / "plots" / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        assert len(data) > 1000, name


def test_report_contents(run_dir):
    text = write_report(run_dir).read_text()
    assert text.startswith("# GRPO run report: ")
    # 0.85 - 0.70 = 0.15 -> +15.0 percentage points
    assert "| heldout | 70.0% (step 0, n=200) | 85.0% (step 20, n=200) | +15.0 pp |" in text
    assert "- steps: 20" in text
    assert "- total training time: 0.7 min" in text  # 40 s / 60
    assert "- mean time per step: 2.0 s" in text
    # first 5 steps: mean of 0.52..0.60 = 0.56; last 5: mean of 0.82..0.90 = 0.86
    assert "- `reward/mean`: first 5 steps 0.56, last 5 steps 0.86" in text
    assert "`reward/correct/mean`" in text and "`kl`" in text
    assert "![Training reward](plots/reward.png)" in text
    assert "![Accuracy](plots/accuracy.png)" in text
    assert "```yaml\nmodel: smollm2-135m-instruct\nlr: 2.0e-5\n```" in text


def test_report_without_eval_or_config(tmp_path):
    _write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "reward/mean": 0.25}])
    text = write_report(tmp_path).read_text()
    assert "Accuracy" not in text and "pp |" not in text
    assert "```yaml" not in text
    assert "- steps: 1" in text
    assert "total training time" not in text
    assert (tmp_path / "plots" / "reward.png").read_bytes().startswith(PNG_SIGNATURE)
    assert not (tmp_path / "plots" / "accuracy.png").exists()


def test_negative_change_and_unlabelled_evals(tmp_path):
    _write_jsonl(tmp_path / "metrics.jsonl", _metrics(3))
    _write_jsonl(
        tmp_path / "eval.jsonl",
        [
            {"step": 3, "accuracy": 0.5, "n": 10, "split": "heldout"},
            {"step": 0, "accuracy": 0.6, "n": 10, "split": "heldout"},
            {"step": 3, "accuracy": 0.9, "n": 10, "split": "train"},
        ],
    )
    text = write_report(tmp_path).read_text()
    assert "| heldout | 60.0% (step 0, n=10) | 50.0% (step 3, n=10) | -10.0 pp |" in text
    assert "| train | 90.0% (step 3, n=10) | — |  |" in text  # one evaluation: no change
    assert text.index("| heldout") < text.index("| train")


def test_truncated_last_line_is_skipped(tmp_path, caplog):
    lines = "".join(json.dumps(r) + "\n" for r in _metrics(4)) + '{"step": 5, "rew'
    (tmp_path / "metrics.jsonl").write_text(lines)
    text = write_report(tmp_path).read_text()
    assert "- steps: 4" in text
    assert "metrics.jsonl:5 is not valid JSON" in caplog.text


def test_missing_metrics_names_the_file(tmp_path):
    with pytest.raises(ReportError, match="metrics.jsonl not found"):
        write_report(tmp_path)


def test_before_after_prefers_labels():
    evals = [
        {"step": 0, "accuracy": 0.1},
        {"step": 5, "accuracy": 0.2, "label": "before"},
        {"step": 9, "accuracy": 0.3, "label": "after"},
        {"step": 12, "accuracy": 0.4},
    ]
    before, after = before_after(evals)
    assert (before["step"], after["step"]) == (5, 9)


def test_eval_before_false_leaves_the_before_column_empty(tmp_path):
    # eval.before: false logs only during / after; the after value (0.85) must not fill "before"
    _write_jsonl(tmp_path / "metrics.jsonl", _metrics())
    _write_jsonl(tmp_path / "eval.jsonl", [
        {"step": 10, "accuracy": 0.80, "n": 200, "split": "heldout", "label": "during"},
        {"step": 20, "accuracy": 0.85, "n": 200, "split": "heldout", "label": "after"},
    ])
    text = write_report(tmp_path).read_text()
    assert "| heldout | — | 85.0% (step 20, n=200) |  |" in text
    assert "no evaluation on that side of training" in text
    assert before_after(read_jsonl(tmp_path / "eval.jsonl")) == (None, {"step": 20, "accuracy": 0.85, "n": 200, "split": "heldout", "label": "after"})


def test_eval_after_false_leaves_the_after_column_empty():
    evals = [{"step": 0, "accuracy": 0.7, "label": "before"}, {"step": 10, "accuracy": 0.8, "label": "during"}]
    before, after = before_after(evals)
    assert (before["step"], after) == (0, None)


def test_moving_average_by_hand():
    # window 2: [1], [1,3]->2, [3,5]->4, [5,7]->6
    assert moving_average([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert moving_average([4.0, 8.0], 1) == [4.0, 8.0]


def test_mid_run_evaluations_are_reported_and_plotted(tmp_path):
    # Trainer.evaluate's labels: before, "during" every eval.every steps, after. The run stopped on
    # its time budget right after the step-20 mid-run eval, so "after" evaluates step 20 again.
    from grpokit.trainer.report import plot_accuracy, read_jsonl

    _write_jsonl(tmp_path / "metrics.jsonl", _metrics())
    evals = [
        {"step": 0, "accuracy": 0.20, "n": 10, "split": "heldout", "label": "before"},
        {"step": 10, "accuracy": 0.50, "n": 10, "split": "heldout", "label": "during"},
        {"step": 20, "accuracy": 0.60, "n": 10, "split": "heldout", "label": "during"},
        {"step": 20, "accuracy": 0.70, "n": 10, "split": "heldout", "label": "after"},
    ]
    _write_jsonl(tmp_path / "eval.jsonl", evals)
    text = write_report(tmp_path).read_text()
    assert "| heldout | 20.0% (step 0, n=10) | 70.0% (step 20, n=10) | +50.0 pp |" in text
    table = text.split("### Every evaluation")[1].split("## Training")[0]
    assert "| heldout | 10 | during | 50.0% | 10 |" in table
    assert "| heldout | 20 | after | 70.0% | 10 |" in table and "60.0%" not in table  # one point per step
    plotted = plot_accuracy(read_jsonl(tmp_path / "eval.jsonl"), tmp_path / "acc.png")
    assert [(e["step"], e["label"]) for e in plotted["heldout"]] == [(0, "before"), (10, "during"), (20, "after")]
    assert (tmp_path / "acc.png").read_bytes().startswith(PNG_SIGNATURE)


def test_no_evaluation_table_without_mid_run_evaluations(run_dir):
    assert "### Every evaluation" not in write_report(run_dir).read_text()
