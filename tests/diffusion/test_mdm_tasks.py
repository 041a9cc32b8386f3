"""The masked-diffusion tasks: prompts in the model's vocabulary, answers and partners by construction, exact-match rewards."""

import pytest

from grpokit.data.tasks import TASKS
from grpokit.families.masked_diffusion.model import MDMTokenizer
from grpokit.rewards.builtin import answer_word, countdown_equation

TOK = MDMTokenizer()


def test_digit_tasks_answers_and_partners():
    row = TASKS.get("mdm_reverse")(seed=0, n_train=5, n_heldout=0).train[0]
    digits = row["prompt"].split()[1]
    assert row["answer"] == digits[::-1] and row["partner"] == digits and len(digits) == 5
    row = TASKS.get("mdm_sort")(seed=0, n_train=5, n_heldout=0, length=6).train[0]
    digits = row["prompt"].split()[1]
    assert row["answer"] == "".join(sorted(digits)) and row["partner"] == row["answer"][::-1] and len(digits) == 6
    row = TASKS.get("mdm_add")(seed=0, n_train=5, n_heldout=0).train[0]
    a, b = row["prompt"].rstrip("=").split("+")
    assert int(row["answer"]) == int(a) + int(b) and int(row["partner"]) == int(a) + int(b) + 1 and len(a) == len(b) == 2
    with pytest.raises(ValueError, match="option 'length' must be in 2..12"):
        TASKS.get("mdm_reverse")(seed=0, n_train=1, n_heldout=0, length=1)


def test_exact_match_and_countdown_rewards_on_the_tasks():
    # "01234" must not match "1234": answer_word compares the first word exactly
    assert answer_word([], ["01234", "1234", "01234 x"], answer=["01234"] * 3) == [1.0, 0.0, 1.0]
    rows = TASKS.get("mdm_countdown")(seed=0, n_train=50, n_heldout=10).train
    cols = dict(numbers=[r["numbers"] for r in rows], target=[r["target"] for r in rows])
    assert countdown_equation([], [r["answer"] for r in rows], **cols) == [1.0] * 50
    assert sum(countdown_equation([], [r["partner"] for r in rows], **cols)) < 10  # the partner is (almost always) wrong


@pytest.mark.parametrize("name", ["mdm_reverse", "mdm_sort", "mdm_add", "mdm_countdown"])
def test_every_task_fits_the_vocabulary_and_the_8_position_canvas(name):
    splits = TASKS.get(name)(seed=0, n_train=300, n_heldout=50)
    assert not {r["prompt"] for r in splits.train} & {r["prompt"] for r in splits.heldout}
    for row in splits.train + splits.heldout:
        TOK.encode(row["prompt"]) and TOK.encode(row["answer"]) and TOK.encode(row["partner"])
        assert len(row["answer"]) <= 7 and row["partner"] != row["answer"]
