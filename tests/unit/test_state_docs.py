"""The docstrings that list the node and job states list exactly the states the types hold."""

from __future__ import annotations

import re
from typing import get_args

import console.jobs.states as states_module
import console.jobs.status as status_module
from console.jobs.states import JobState, NodeState
from console.jobs.store import JobRecord, NodeRecord


def _attribute_doc(doc: str, name: str) -> str:
    """The text of one ``name:`` entry of a Google-style Attributes section."""
    m = re.search(rf"^\s+{name}: (.*?)(?=^\s+\w[\w /]*: |\Z)", doc, re.M | re.S)
    assert m, name
    return m[1]


def _quoted(text: str) -> set[str]:
    return set(re.findall(r"``([a-z_]+)``", text))


def test_the_store_lists_exactly_the_states_that_exist() -> None:
    assert NodeRecord.__doc__ and JobRecord.__doc__
    assert _quoted(_attribute_doc(NodeRecord.__doc__, "state")) == set(get_args(NodeState))
    assert _quoted(_attribute_doc(JobRecord.__doc__, "state")) == {
        *get_args(JobState),
        "removed",
        "removed_at",
    }


def test_the_state_machine_and_the_types_module_list_every_node_state() -> None:
    nodes = set(get_args(NodeState))
    for doc in (status_module.__doc__, states_module.__doc__):
        assert doc is not None
        assert nodes <= _quoted(doc)
