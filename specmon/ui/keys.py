"""Textual bindings generated from the action table (specmon/keymap.py): one place per action."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from specmon.keymap import actions_for


def bindings(target: str, namespace: str | None = None) -> list[BindingType]:
    """The bindings of the actions that live on `target`, with their ids (remappable);
    `namespace` ("app"): the action runs there (a server panel's keys act through the app's
    server control, on the focused server)."""
    return [Binding(a.key, f"{namespace}.{a.action}" if namespace else a.action, a.description,
                    show=a.show, id=a.id)
            for a in actions_for(target)]


__all__ = ["bindings"]
