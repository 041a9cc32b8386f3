"""Policy families behind one interface: the trainer talks to a :class:`Policy`, never to a model class."""

from grpokit.policies.base import Capabilities, Policy, UnitForward

__all__ = ["Capabilities", "Policy", "UnitForward"]
