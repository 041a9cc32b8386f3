"""ActiveVLN in miniature: a seeded text world of rooms, coloured doors and objects, navigated by instruction.

Zhang et al., "ActiveVLN: Towards Active Exploration via Multi-Turn RL in Vision-and-Language
Navigation", arXiv 2509.12618 (§IV; code github.com/arvillion/ActiveVLN, ``vlnce_server/env.py``).
What carries over from the paper, with a text world in place of Habitat's VLN-CE scenes:

* **actions**: each turn is up to 3 primitive actions separated by ",": ``forward`` (one cell,
  1 m; walls block, doors pass; a blocked move is not reported, as VLN-CE's sensors report no
  collision: the view just does not change), ``turn left``, ``turn right``, ``stop``; a turn that
  is not such a list ends the episode as a failure (the paper's malformed-turn rule);
* **reward** at the end: success = the agent said ``stop`` within ``success_distance`` (3 m) of
  the goal; ``R = 1[success] * R_base * (1 - min(d / 3, 1))`` with ``R_base = 15`` (the R2R / RxR
  scripts' ``weighted_success``); 0 without a stop;
* **dynamic early stopping**: step budget ``N_budget = min(floor(tol * N_gt), N_max)`` with
  ``tol = 2``, ``N_max = 120`` and ``N_gt`` the expert path's primitive actions: the episode ends as
  a failure (R = 0) as soon as executed steps exceed it; the turn budget is
  ``environment.max_turns`` (the paper: 40).

The world: ``rooms x rooms`` square rooms of ``room_size`` cells (the row's ``rooms`` and
``room_size``, the task's options: 2 x 2 or 3 x 3); neighbouring rooms share a wall with one door,
each door a colour of its own; each room holds one object, each a colour of its own. The instruction names
the door the expert path goes through first and the goal object ("go through the red door, then
stop at the blue box"). Observations describe, in the agent's frame, what its room holds (objects
and doors, ahead / left / right / behind, and how many steps away), and the object right in front
of the agent when it faces one from the next cell [grpokit's world and text].

The demonstrations for imitation (:func:`noisy_expert_turns`) are the expert's shortest path,
chunked into turns of up to 3 moves, a ``stop`` turn of its own once it faces the goal, and DART
noise turns (weight 0) it recovers from [grpokit's choices, each justified where it is made]:
the imitated policy then stops on the sight of the goal rather than after a count of turns, and
when it loses its way it keeps exploring. That long tail is what the paper's early stopping
prunes; with clean, uniformly chunked demonstrations the 135M policy stopped (mostly in the
wrong place) within ~2.4 turns, and early stopping saved 0.6% of the rollout tokens (measured).
The ``activevln`` presets use 3 x 3 rooms: in 2 x 2 worlds a wandering episode soon finds the goal
room (two thirds of the imitated policy's successes came after 2 x N_gt moves, measured), unlike
R2R's many-room houses, and GRPO without early stopping learned that search instead of the route.
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Optional

from grpokit.envs.base import ENVIRONMENTS, StepResult

COLOURS = ("red", "blue", "green", "yellow", "purple", "white", "orange", "grey")
EXTRA_COLOURS = ("black", "pink", "brown", "cyan")  # 3 x 3 worlds: 12 doors
OBJECTS = ("box", "ball", "chair", "lamp", "plant", "table")
HEADINGS = ((0, -1), (1, 0), (0, 1), (-1, 0))  # north, east, south, west (y grows south)
ACTION = re.compile(r"^\s*(forward|turn left|turn right|stop)\s*$")


def weighted_success(stopped: bool, distance: float, *, success_distance: float = 3.0, r_base: float = 15.0) -> float:
    """``1[stop and d <= success_distance] * r_base * (1 - min(d / success_distance, 1))`` (ActiveVLN's weighted_success)."""
    if not stopped or not math.isfinite(distance) or distance > success_distance:
        return 0.0
    return r_base * (1.0 - min(distance / success_distance, 1.0))


def step_budget(n_gt: int, *, tol: float = 2.0, n_max: int = 120) -> int:
    """``min(floor(tol * N_gt), N_max)``: primitive steps allowed before the episode fails (dynamic early stopping)."""
    return min(int(math.floor(tol * n_gt)), n_max)


def parse_turn(text: str, max_actions: int = 3) -> Optional[list[str]]:
    """The turn's primitive actions (1..max_actions, ","-separated), or None when malformed."""
    parts = [p.strip().lower().rstrip(".") for p in text.strip().split(",")]
    if not 1 <= len(parts) <= max_actions or not all(ACTION.match(p) for p in parts):
        return None
    return parts


@dataclass(frozen=True)
class World:
    """Rooms on a grid: cell (x, y), walls between rooms except at doors; one object per room."""

    rooms: int
    room_size: int
    doors: dict  # frozenset({room_a, room_b}) -> (colour, (x, y) of the door cell on the wall)
    objects: dict  # room -> (colour, kind, (x, y))

    @property
    def size(self) -> int:
        return self.rooms * self.room_size

    def room_of(self, cell: tuple[int, int]) -> tuple[int, int]:
        return cell[0] // self.room_size, cell[1] // self.room_size

    def passable(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        """One forward move from cell a to neighbouring cell b: inside the world and not through a wall."""
        if not (0 <= b[0] < self.size and 0 <= b[1] < self.size):
            return False
        ra, rb = self.room_of(a), self.room_of(b)
        if ra == rb:
            return True
        door = self.doors.get(frozenset((ra, rb)))
        return door is not None and door[1] in (a, b)


def make_world(rng: random.Random, rooms: int = 2, room_size: int = 4) -> World:
    """A seeded world: a door in every wall between neighbouring rooms, one object per room, colours unique.

    Door colours are unique in the world (so "the red door" names one door) and object colours are
    unique too; 2 x 2 worlds draw from :data:`COLOURS`, 3 x 3 worlds (12 doors) from
    ``COLOURS + EXTRA_COLOURS`` (2 x 2 worlds are unchanged by the extra colours).
    """
    n_doors = 2 * rooms * (rooms - 1)
    palette = COLOURS if max(n_doors, rooms * rooms) <= len(COLOURS) else COLOURS + EXTRA_COLOURS
    if max(n_doors, rooms * rooms) > len(palette):
        raise ValueError(f"text_navigation: rooms={rooms} needs {n_doors} door colours, only {len(palette)} exist; use rooms <= 3")
    door_colours = rng.sample(palette, k=n_doors)
    doors, k = {}, 0
    for ry in range(rooms):
        for rx in range(rooms):
            for nx, ny in ((rx + 1, ry), (rx, ry + 1)):
                if nx < rooms and ny < rooms:
                    mid = rng.randrange(1, room_size - 1)
                    cell = ((nx * room_size, ry * room_size + mid) if nx > rx else (rx * room_size + mid, ny * room_size))
                    doors[frozenset(((rx, ry), (nx, ny)))] = (door_colours[k], cell)
                    k += 1
    object_colours = rng.sample(palette, k=rooms * rooms)
    objects = {}
    for i, room in enumerate((rx, ry) for ry in range(rooms) for rx in range(rooms)):
        x = room[0] * room_size + rng.randrange(1, room_size - 1)
        y = room[1] * room_size + rng.randrange(1, room_size - 1)
        objects[room] = (object_colours[i], rng.choice(OBJECTS), (x, y))
    return World(rooms, room_size, doors, objects)


def move(world: World, agent: tuple[int, int, int], act: str, goal: tuple[int, int]) -> tuple[tuple[int, int, int], bool]:
    """(the pose after one primitive move, whether a forward move was blocked: a wall, the world's edge, the goal object)."""
    x, y, h = agent
    if act == "forward":
        dx, dy = HEADINGS[h]
        if world.passable((x, y), (x + dx, y + dy)) and (x + dx, y + dy) != goal:
            return (x + dx, y + dy, h), False
        return agent, True
    return (x, y, (h + (1 if act == "turn right" else -1)) % 4), False


def expert_actions(world: World, start: tuple[int, int, int], goal: tuple[int, int]) -> list[str]:
    """Shortest primitive-action path (BFS over cell and heading) to a cell next to ``goal``, facing it, then ``stop``."""
    start_state = start
    parents: dict = {start_state: None}
    queue = deque([start_state])
    while queue:
        state = queue.popleft()
        x, y, h = state
        dx, dy = HEADINGS[h]
        if (x + dx, y + dy) == goal:
            path = []
            while parents[state] is not None:
                state, act = parents[state]
                path.append(act)
            return path[::-1] + ["stop"]
        moves = [((x, y, (h - 1) % 4), "turn left"), ((x, y, (h + 1) % 4), "turn right")]
        if world.passable((x, y), (x + dx, y + dy)) and (x + dx, y + dy) != goal:
            moves.append(((x + dx, y + dy, h), "forward"))
        for nxt, act in moves:
            if nxt not in parents:
                parents[nxt] = (state, act)
                queue.append(nxt)
    raise ValueError("the goal cannot be reached")


def _relative(agent: tuple[int, int, int], target: tuple[int, int]) -> str:
    """Where ``target`` is in the agent's frame: "2 ahead, 1 left" (cells; "here" when on it)."""
    x, y, h = agent
    fx, fy = HEADINGS[h]
    rx, ry = HEADINGS[(h + 1) % 4]
    vx, vy = target[0] - x, target[1] - y
    ahead, right = vx * fx + vy * fy, vx * rx + vy * ry
    parts = []
    if ahead:
        parts.append(f"{abs(ahead)} {'ahead' if ahead > 0 else 'behind'}")
    if right:
        parts.append(f"{abs(right)} {'right' if right > 0 else 'left'}")
    return ", ".join(parts) or "here"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def describe(world: World, agent: tuple[int, int, int]) -> str:
    """What the agent sees: its room's object and doors, each relative to its heading, and the object it faces from next to it.

    The last sentence ("Right in front of you is a blue box.") is the view the expert stops on
    (it stops facing the goal), so stopping is grounded in a sight the instruction names.
    """
    room = world.room_of(agent[:2])
    colour, kind, cell = world.objects[room]
    seen = [f"{_article(colour)} {colour} {kind} ({_relative(agent, cell)})"]
    for pair, (door_colour, door_cell) in sorted(world.doors.items(), key=lambda kv: kv[1][0]):
        if room in pair:
            seen.append(f"{_article(door_colour)} {door_colour} door ({_relative(agent, door_cell)})")
    facing = ("north", "east", "south", "west")[agent[2]]
    dx, dy = HEADINGS[agent[2]]
    close = f" Right in front of you is {_article(colour)} {colour} {kind}." if cell == (agent[0] + dx, agent[1] + dy) else ""
    return f"You face {facing}. You see " + "; ".join(seen) + "." + close


NAV_FORMAT = "Each turn, reply with up to 3 actions separated by commas: forward, turn left, turn right, stop."


def navigation_episode(seed: int, rooms: int = 2, room_size: int = 4) -> dict[str, Any]:
    """One seeded episode: world, start pose, goal object in a neighbouring room, instruction and expert path."""
    rng = random.Random(f"grpokit/text_navigation/{seed}")
    world = make_world(rng, rooms, room_size)
    start_room = (rng.randrange(rooms), rng.randrange(rooms))
    neighbours = [r for pair in world.doors for r in pair if start_room in pair and r != start_room]
    goal_room = rng.choice(sorted(neighbours))
    door_colour, _ = world.doors[frozenset((start_room, goal_room))]
    occupied = {world.objects[start_room][2]}
    while True:
        start = (start_room[0] * room_size + rng.randrange(room_size), start_room[1] * room_size + rng.randrange(room_size), rng.randrange(4))
        if start[:2] not in occupied:
            break
    colour, kind, goal = world.objects[goal_room]
    actions = expert_actions(world, start, goal)
    instruction = f"Go through the {door_colour} door, then stop at the {colour} {kind}."
    return {"world": world, "start": start, "goal": goal, "instruction": instruction, "expert": actions}


def navigation_prompt(ep: dict[str, Any]) -> str:
    """The first observation: the instruction, the action format and the start view."""
    return f"{ep['instruction']} {NAV_FORMAT}\n{describe(ep['world'], ep['start'])}"


def noisy_expert_turns(ep: dict[str, Any], seed: int, *, noise: float = 0.3, max_noisy: int = 2, per_turn: int = 3,
                       tol: float = 2.0, n_max: int = 120) -> tuple[list[str], list[int]]:
    """The expert's turns with injected noise, and each turn's loss weight (0: a noise turn).

    DART (Laskey et al., "DART: Noise Injection for Robust Imitation Learning", arXiv 1703.09327):
    before a turn, with probability ``noise`` (at most ``max_noisy`` times, and only while the
    episode still fits the step budget), 1-3 random moves are executed as a turn of their own; the
    expert then re-plans from where they left it. Noise turns carry weight 0 (observed, not
    imitated), so the demonstrations show recoveries and episodes of every length, and the stop
    is learnt from the view of the goal rather than from a count of turns [grpokit's choice: the
    paper chunks clean R2R expert paths, its stop included]. The expert's stop is a turn of its
    own, after the view of the goal. Seeded by ``seed``; noise 0 gives the clean path in turns of
    up to ``per_turn`` moves.
    """
    rng = random.Random(f"grpokit/text_navigation/noise/{seed}")
    world, goal, agent = ep["world"], ep["goal"], ep["start"]
    budget = step_budget(len(ep["expert"]) - 1, tol=tol, n_max=n_max)
    turns, weights, steps, noisy = [], [], 0, 0
    while True:
        plan = expert_actions(world, agent, goal)[:-1]
        if plan and noisy < max_noisy and rng.random() < noise:
            acts = [rng.choice(("forward", "turn left", "turn right")) for _ in range(rng.randint(1, per_turn))]
            after = agent
            for act in acts:
                after = move(world, after, act, goal)[0]
            if steps + len(acts) + len(expert_actions(world, after, goal)) - 1 <= budget:
                turns.append(", ".join(acts))
                weights.append(0)
                agent, steps, noisy = after, steps + len(acts), noisy + 1
                continue
        if not plan:
            return turns + ["stop"], weights + [1]
        for act in plan[:per_turn]:
            agent = move(world, agent, act, goal)[0]
        turns.append(", ".join(plan[:per_turn]))
        weights.append(1)
        steps += len(plan[:per_turn])


@ENVIRONMENTS.register("text_navigation")
class TextNavigation:
    """The navigation episode of the row's ``world_seed`` (see the module docstring for the rules).

    ``early_stopping``: end the episode as a failure once executed steps exceed
    ``step_budget(N_gt, tol, n_max)`` (False: the run's turn budget ``environment.max_turns`` or its
    token cap ``environment.max_episode_tokens`` ends a long episode, whichever comes first).
    info: ``success``, ``distance`` (m, at the end), ``steps`` (executed primitive actions),
    ``pruned`` (1: ended by the step budget), ``malformed`` (1: ended by a malformed turn),
    ``n_gt`` (the expert path's moves), ``budget`` (its step budget), ``blocked`` (forward moves
    that hit a wall or the goal object), ``spl`` (success weighted by path length, Anderson et al.,
    "On Evaluation of Embodied Navigation Agents", arXiv 1807.06757: ``S * N_gt / max(steps, N_gt)``
    in primitive moves).
    """

    def __init__(self, *, success_distance: float = 3.0, r_base: float = 15.0, tol: float = 2.0, n_max: int = 120,
                 early_stopping: bool = True, max_actions_per_turn: int = 3) -> None:
        for name, value, low in (("success_distance", success_distance, 0), ("tol", tol, 0), ("n_max", n_max, 0),
                                 ("max_actions_per_turn", max_actions_per_turn, 0)):
            if not value > low:
                raise ValueError(f"text_navigation: environment.options.{name}={value} must be above {low}")
        self.success_distance, self.r_base, self.tol, self.n_max = success_distance, r_base, tol, n_max
        self.early_stopping, self.per_turn = early_stopping, max_actions_per_turn

    def reset(self, row: dict[str, Any], seed: Optional[int] = None) -> str:
        # the world is the row's: its seed and size (the task's ``rooms`` / ``room_size`` options)
        missing = [k for k in ("world_seed", "rooms", "room_size") if k not in row]
        if missing:
            raise ValueError(f"text_navigation: the row has no {', '.join(missing)} column (the world it is played in): "
                             "use data.task=text_navigation or give your rows these columns")
        ep = navigation_episode(int(row["world_seed"]), int(row["rooms"]), int(row["room_size"]))
        self.world, self.agent, self.goal = ep["world"], ep["start"], ep["goal"]
        self.n_gt = len(ep["expert"]) - 1  # primitive moves, the final stop not counted
        self.budget = step_budget(self.n_gt, tol=self.tol, n_max=self.n_max)
        self.steps = self.blocked = 0
        return ""  # the row's prompt (navigation_prompt) is the first observation

    def _distance(self) -> float:
        return math.dist(self.agent[:2], self.goal)

    def _info(self, **flags: bool) -> dict[str, float]:
        info = {"distance": self._distance(), "steps": float(self.steps), "n_gt": float(self.n_gt),
                "blocked": float(self.blocked), "budget": float(self.budget),
                "spl": float(flags.get("success", False)) * self.n_gt / max(self.steps, self.n_gt, 1)}
        return {**info, **{k: float(v) for k, v in flags.items()}}

    def _end(self, reward: float, *, success: bool = False, pruned: bool = False, malformed: bool = False) -> StepResult:
        return StepResult("", reward, terminated=True, info=self._info(success=success, pruned=pruned, malformed=malformed))

    def step(self, action: str) -> StepResult:
        actions = parse_turn(action, self.per_turn)
        if actions is None:
            return self._end(0.0, malformed=True)
        for act in actions:
            if act == "stop":
                reward = weighted_success(True, self._distance(), success_distance=self.success_distance, r_base=self.r_base)
                return self._end(reward, success=self._distance() <= self.success_distance)
            self.steps += 1
            self.agent, bumped = move(self.world, self.agent, act, self.goal)
            self.blocked += bumped
            if self.early_stopping and self.steps > self.budget:
                return self._end(0.0, pruned=True)
        return StepResult(describe(self.world, self.agent), 0.0, info=self._info(success=False))
