"""Knowledge editing: procedural counterfactual facts, TPSFT edits on an FFN window, free-generation metrics, EtCon.

Li et al., "EtCon: Edit-then-Consolidate for Reliable Knowledge Editing", arXiv 2512.04753.
Modules: ``facts`` (edit sets), ``tpsft`` (the loss), ``editor`` (sequential editing),
``evaluate`` (reliability / generalisation / locality), ``pipeline`` (both stages), ``cli``
(``grpokit edit``). Importing this package loads none of them.
"""
