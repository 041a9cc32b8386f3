"""The ``counterfactual_edits`` task: EtCon's consolidation rows from the procedural fact set, no file needed.

Rows: the ``n_train`` edits' questions followed by the authors' CoT instruction, ``answer`` =
the new object, ``original_knowledge`` = the pre-edit fact (for the consistency reward); held-out
rows: the same edits' paraphrases (the first ``n_heldout``). The facts are
:func:`grpokit.editing.facts.make_facts` ``(n_train, seed)``: those ``grpokit edit --facts
n_train --seed seed`` writes (Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge
Editing", arXiv 2512.04753, its consolidation stage).
"""

from __future__ import annotations

from grpokit.data.tasks import TASKS, TaskSplits


@TASKS.register("counterfactual_edits")
def counterfactual_edits(seed: int, n_train: int, n_heldout: int, *, n_paraphrases: int = 2, n_neighbours: int = 1) -> TaskSplits:
    """EtCon consolidation rows of ``n_train`` procedural counterfactual edits (held out: their paraphrases)."""
    from grpokit.editing.facts import consolidation_rows, make_facts  # lazily: facts imports grpokit.data.files

    edits = make_facts(n_train, seed=seed, n_paraphrases=n_paraphrases, n_neighbours=n_neighbours)
    return TaskSplits(train=consolidation_rows(edits), heldout=consolidation_rows(edits, paraphrases=True)[:n_heldout])
