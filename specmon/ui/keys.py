"""Textual bindings generated from the action table (specmon/keymap.py): one place per action."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from specmon.keymap import actions_for


def bindings(target: str) -> list[BindingType]:
    """The bindings of the actions that live on `target`, with their ids (remappable)."""
    return [Binding(a.key, a.action, a.description, show=a.show, id=a.id)
            for a in actions_for(target)]


__all__ = ["bindings"]
