"""A user reward for grpokit: 1.0 when the completion names the expected capital, with a
small bonus for a short answer. Any function with this signature works:

    fn(prompts: list[str], completions: list[str], **columns) -> list[float | None]

``columns`` holds the dataset's other columns as per-sample lists (here ``answer``).
"""


def capital_reward(prompts, completions, answer, **kwargs):
    scores = []
    for completion, gold in zip(completions, answer):
        correct = gold.lower() in completion.lower()
        brevity = 0.2 if len(completion.split()) <= 12 else 0.0
        scores.append((1.0 if correct else 0.0) + brevity)
    return scores


def is_correct(prompts, completions, answer, **kwargs):
    """Accuracy judge: 1.0 when the capital is named."""
    return [1.0 if g.lower() in c.lower() else 0.0 for c, g in zip(completions, answer)]
