"""Every built-in plugin module, in one list, and the loader of third-party plugins.

Importing a module of :data:`BUILTIN_MODULES` registers what it defines (families, losses,
advantages, rewards, environments, tasks, …). Registries load this list on first use, so no
registry module imports its own plugins (which would knot the package into import cycles).
Third-party plugins are modules named by the ``grpokit.plugins`` entry-point group
(``importlib.metadata``, as pytest's ``pytest11``) or by a config's ``plugins`` list.
"""

from __future__ import annotations

import importlib
import importlib.metadata

BUILTIN_MODULES: tuple[str, ...] = (
    "grpokit.families.causal_lm.family",
    "grpokit.families.vision_lm.family",
    "grpokit.families.masked_diffusion.family",
    "grpokit.families.palette.family",
    "grpokit.families.flow_matching.family",
    # policy losses (grpokit.algos.losses defines ppo_clip itself)
    "grpokit.algos.losses_extra",  # cispo, sapo, humanline, grpo_verif, …
    "grpokit.algos.reg_grpo",
    "grpokit.algos.disco",
    "grpokit.algos.kdrl",
    "grpokit.algos.papo",
    # KL estimators of sequence-unit policies (ESPO's seq_k2)
    "grpokit.algos.espo",
    # offline objectives
    "grpokit.editing.tpsft",  # EtCon's edit objective
    # rewards
    "grpokit.rewards.group",  # group-level rewards
    "grpokit.rewards.reward_model",  # rm_score
    "grpokit.rewards.sql",  # SQL execution rewards
    "grpokit.rewards.sql_match",  # SQL clause F1, normalised string match
    "grpokit.rewards.sql_judge",  # SQL LLM-judge grade
    "grpokit.rewards.crpo",  # CRPO rule rewards
    "grpokit.rewards.safety",  # safety_rule
    "grpokit.rewards.length",  # length_target
    "grpokit.rewards.synth",  # synth_verify
    "grpokit.rewards.etcon",  # EtCon consolidation rewards
    "grpokit.families.flow_matching.rewards",  # image rewards of flow policies
    # tasks
    "grpokit.data.sql_task",  # text_to_sql
    "grpokit.data.ts_sql",  # ts_sql (TS-SQL-style plan-then-SQL records)
    "grpokit.data.mcq_task",  # clinical_mcq (CRPO)
    "grpokit.data.rewrite_task",  # prompt_rewrites and its demonstration writer (DPP-GRPO)
    "grpokit.data.safety_task",  # safety_prompts
    "grpokit.families.vision_lm.tasks",  # vision_qa, video_qa
    "grpokit.editing.task",  # counterfactual_edits
    "grpokit.families.masked_diffusion.tasks",  # mdm_reverse, mdm_sort, mdm_add, mdm_countdown
    "grpokit.families.palette.images",  # palette_classes (Co-GRPO)
    "grpokit.families.flow_matching.procedural",  # flow_images
    # demonstration writers
    "grpokit.data.sql_cot",
    # environments and tools
    "grpokit.envs.guessing",  # guess_number
    "grpokit.envs.navigation",  # text_navigation (ActiveVLN)
    "grpokit.envs.tools",  # tools (the calculator and python tools)
    "grpokit.envs.gym_adapter",  # gymnasium (a gymnasium.Env)
    "grpokit.envs.openenv_adapter",  # openenv
    "grpokit.envs.trl_env",  # trl (TRL's environment_factory / tools)
)

ENTRY_POINT_GROUP = "grpokit.plugins"

_loaded = False


def load_plugins() -> None:
    """Import every built-in plugin module, then every ``grpokit.plugins`` entry point, once.

    Re-entrant: the flag is set before the first import, so a module being imported may look a
    registry up (it sees what is registered so far). A failure clears the flag, so the next
    lookup raises again instead of seeing a half-filled registry.
    """
    global _loaded
    if _loaded:
        return
    _loaded = True
    try:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        load_entry_points()
    except BaseException:
        _loaded = False
        raise


def load_entry_points() -> list[str]:
    """Load the ``grpokit.plugins`` entry points of the installed distributions; returns their ``name = value`` lines.

    Each entry point names a module (imported) or ``module:function`` (imported, then called with no
    arguments), as pytest loads its ``pytest11`` group. A distribution declares one in its
    ``pyproject.toml``::

        [project.entry-points."grpokit.plugins"]
        my_losses = "my_package.losses"

    A plugin that fails to load is one :class:`~grpokit.plugins.PluginError` line naming the entry
    point and its distribution.
    """
    from grpokit.plugins import PluginError

    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"grpokit plugin '{ep.name} = {ep.value}' (entry point of distribution {_dist_name(ep)})"
        try:
            obj = ep.load()
            if ep.attr:
                if not callable(obj):
                    raise TypeError(f"{ep.attr} is a {type(obj).__name__}, not a function to call")
                obj()
        except Exception as exc:
            reason = (str(exc).splitlines() or [""])[0]
            raise PluginError(f"{where} failed to load: {type(exc).__name__}: {reason}; fix or uninstall that distribution") from exc
        loaded.append(f"{ep.name} = {ep.value}")
    return loaded


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"'{dist.name} {dist.version}'" if dist is not None else "unknown"
