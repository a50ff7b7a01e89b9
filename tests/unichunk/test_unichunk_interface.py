"""`unichunk.interface.IndexService` is one interface with two implementations: a `Pipeline` in this
process and the CLI's client of a running service. Both take the same arguments and return the same
types, so the CLI's code after "which one?" is one path (`tests/deployments/test_service_handover.py`
compares their answers on a real service)."""

from __future__ import annotations

import inspect
from typing import get_type_hints

from unichunk.deployments.cli.service_client import ServiceClient
from unichunk.interface import IndexService, SearchArgs
from unichunk.pipeline import Pipeline

OPERATIONS = ("search", "entity", "status", "generations", "documents", "delete", "close")


def _returns(cls: type, name: str) -> str:
    return str(inspect.signature(getattr(cls, name)).return_annotation)


def test_both_implementations_answer_every_operation_with_the_same_type() -> None:
    assert {n for n in vars(IndexService) if not n.startswith("_")} == set(OPERATIONS)
    for name in OPERATIONS:
        wanted = _returns(IndexService, name)
        assert [_returns(Pipeline, name), _returns(ServiceClient, name)] == [wanted, wanted], name


def test_both_take_the_same_arguments() -> None:
    for name in OPERATIONS:
        declared = inspect.signature(getattr(IndexService, name)).parameters
        for cls in (Pipeline, ServiceClient):
            taken = inspect.signature(getattr(cls, name)).parameters
            for parameter in declared.values():
                if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                    continue
                assert parameter.name in taken, (cls.__name__, name, parameter.name)
                assert taken[parameter.name].default == parameter.default, (
                    cls.__name__,
                    name,
                    parameter.name,
                )
    # the search options: Pipeline names each; the client takes them as `SearchArgs`
    search = inspect.signature(Pipeline.search).parameters
    assert set(get_type_hints(SearchArgs, include_extras=False)) <= set(search)
    assert inspect.signature(ServiceClient.search).parameters["options"].annotation == "Unpack[SearchArgs]"
