"""clinical_mcq: seeded, one correct option recomputed from the question, distinct error-model distractors;
the crpo preset's rewards on its rows."""

import re

import pytest

from grpokit.config import load_config
from grpokit.data.mcq_task import LETTERS, clinical_mcq
from grpokit.rewards.crpo import parse_options
from grpokit.rewards.scoring import score_completions
from grpokit.trainer.setup import build_rewards

NUM = r"(\d+(?:\.\d+)?)"


def recompute(row):
    """The correct value from the question text alone (independent of the generator's code)."""
    q = row["prompt"].split("\n")[0]
    kind = row["domain"]
    if kind == "weight_dose":
        w, d = re.search(rf"weighing {NUM} kg .* {NUM} mg/kg", q).groups()
        return float(w) * float(d)
    if kind == "tablets":
        dose, strength = re.search(rf" {NUM} mg by mouth\. Tablets contain {NUM} mg", q).groups()
        return float(dose) / float(strength)
    if kind == "liquid":
        dose, conc, vol = re.search(rf" {NUM} mg\. The vial contains {NUM} mg in {NUM} mL", q).groups()
        return float(dose) / float(conc) * float(vol)
    assert kind == "infusion"
    vol, hours = re.search(rf"^{NUM} mL of .* over {NUM} hours", q).groups()
    return float(vol) / float(hours)


def test_generator_is_seeded_and_deterministic():
    a = clinical_mcq(seed=0, n_train=50, n_heldout=20)
    assert a == clinical_mcq(seed=0, n_train=50, n_heldout=20)
    assert a.train != clinical_mcq(seed=1, n_train=50, n_heldout=20).train
    assert clinical_mcq(seed=0, n_train=10, n_heldout=20).heldout == a.heldout  # held-out fixed whatever n_train


def test_every_row_has_exactly_one_correct_option_and_distinct_distractors():
    splits = clinical_mcq(seed=0, n_train=400, n_heldout=100)
    letters, kinds = set(), set()
    for row in splits.train + splits.heldout:
        options = row["options"]
        assert len(options) == 4 and len(set(options)) == 4  # four distinct texts
        value = recompute(row)
        numbers = [float(o.split()[0]) for o in options]
        correct = [i for i, x in enumerate(numbers) if abs(x - value) < 0.005]
        assert correct == [LETTERS.index(row["answer"])], (row["prompt"], options)  # exactly one, the gold letter
        assert all(x > 0 for x in numbers)
        assert parse_options(None, row["prompt"]) == dict(zip(LETTERS, options))  # the prompt's "A. …" lines
        letters.add(row["answer"])
        kinds.add(row["domain"])
    assert letters == set(LETTERS) and kinds == {"weight_dose", "tablets", "liquid", "infusion"}


def test_kinds_option_is_checked():
    rows = clinical_mcq(seed=0, n_train=20, n_heldout=0, kinds=["infusion"]).train
    assert {r["domain"] for r in rows} == {"infusion"}
    with pytest.raises(ValueError, match="option 'kinds'"):
        clinical_mcq(seed=0, n_train=2, n_heldout=0, kinds=["dosage"])


def _answer(row, letter, mentioned):
    """A CRPO-format response discussing the ``mentioned`` options and concluding (and boxing) ``letter``."""
    texts = dict(zip(LETTERS, row["options"]))
    think = " ".join(f"Option {m} ({texts[m]}) was checked." for m in mentioned) + f" So the answer is {letter}."
    return f"<think>{think}</think>\n<answer>It is {texts[letter]}. \\boxed{{{letter}}}</answer>"


def test_crpo_preset_rewards_on_generated_rows():
    cfg = load_config(preset="crpo")
    assert cfg.data.task == "clinical_mcq"
    rewards = build_rewards(cfg.rewards)
    row = clinical_mcq(seed=0, n_train=1, n_heldout=0).train[0]
    gold = row["answer"]
    wrong = next(letter for letter in LETTERS if letter != gold)
    # the same text but for the concluded letter: only r_acc changes (1 -> 0), and it weighs 10
    completions = [_answer(row, gold, LETTERS), _answer(row, wrong, LETTERS), _answer(row, gold, LETTERS[:2])]
    cols = {k: [row[k]] * 3 for k in ("answer", "options")}
    scores = score_completions(rewards, [row["prompt"]] * 3, completions, cols)
    assert scores.per_reward["crpo_accuracy"].tolist() == [1.0, 0.0, 1.0]
    assert scores.per_reward["crpo_format"].tolist() == [1.5, 1.5, 1.5]  # tags + a summary beside the box
    assert scores.per_reward["crpo_faithfulness"].tolist() == [1.0, 1.0, 1.0]  # reasoning concludes the boxed letter
    assert scores.per_reward["crpo_comprehensiveness"].tolist() == [1.0, 1.0, 0.5]  # 2 of the 4 options discussed
    total = scores.total.tolist()
    # 10·(1 − 0) + 0 (format, faithfulness, comprehensiveness unchanged) + 0.5·Δr_lang (same characters: 0)
    assert total[0] - total[1] == pytest.approx(10.0, abs=1e-5)
    # the third answer discusses 2 of 4 options: r_comp 1 -> 0.5 with weight 1, and a shorter text
    lang = scores.per_reward["crpo_language"].tolist()
    assert total[0] - total[2] == pytest.approx(0.5 + 0.5 * (lang[0] - lang[2]), abs=1e-5)


def test_worked_trace_scores_the_crpo_maximum():
    from grpokit.data.demonstrations import demonstration_splits

    cfg = load_config(preset="crpo_sft")
    splits = demonstration_splits(cfg.data, clinical_mcq(seed=0, n_train=20, n_heldout=5))
    rows = splits.train + splits.heldout
    rewards = build_rewards(load_config(preset="crpo").rewards)
    cols = {k: [r[k] for r in rows] for k in ("answer", "options")}
    scores = score_completions(rewards, [r["prompt"] for r in rows], [r["completion"] for r in rows], cols)
    # 10·1 (accuracy) + 1·1.5 (format with a summary) + 0.5·1 (ASCII) + 1·1 (faithful) + 1·1 (all 4 options) = 14
    assert scores.total.tolist() == pytest.approx([14.0] * len(rows))
    with pytest.raises(ValueError, match="no 'why' column"):
        from grpokit.data.mcq_task import clinical_mcq_trace

        clinical_mcq_trace({"answer": "A", "options": ["1 mg"] * 4, "working": "x"})


def test_crpo_sft_preset_trains_two_steps_on_the_traces(tmp_path):
    import json

    from grpokit.cli import main
    from grpokit.testing import save_tiny_model

    sets = ["logging.progress=false", "model.lora.target_modules=[q_proj, v_proj]", f"model.name={save_tiny_model(tmp_path / 'm')}",
            f"logging.output_dir={tmp_path / 'run'}", "train.steps=2", "data.n_train=16", "data.n_heldout=4",
            "offline.max_completion_tokens=32"]
    assert main(["train", "--preset", "crpo_sft", *[a for s in sets for a in ("--set", s)]]) == 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == [1, 2] and all(r["loss"] > 0 for r in steps)
