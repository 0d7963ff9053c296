"""Signature conformance of the engine adapters with the pinned upstream interfaces
(upstream_signatures.json: the methods and parameters read from vLLM's and SGLang's sources at
the commits it names). Each adapter must define every pinned method, with the upstream
positional parameters first and in order (anything more only with a default or keyword-only),
and name exactly those methods in its IMPLEMENTS. test_real_base_class checks the same facts
against the engine's own base class and that the adapter subclasses it: the only test allowed
to skip, and only when the engine is not importable (here: vLLM needs torch 2.x, and SGLang is
not packaged by Debian)."""

from __future__ import annotations

import importlib
import inspect
import json
import os

import pytest

FACTS = json.load(open(os.path.join(os.path.dirname(__file__), "upstream_signatures.json")))
ENGINES = ["vllm", "sglang"]


def adapter(engine):
    mod, cls = FACTS[engine]["adapter"].split(":")
    m = importlib.import_module(mod)
    return m, getattr(m, cls)


def params(fn) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def conforms(fn, names: list[str]) -> str:
    """"" when fn takes names positionally first and everything else optionally."""
    ps = params(fn)
    pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if [p.name for p in pos[: len(names)]] != names:
        return f"positional parameters {[p.name for p in pos]} do not start with {names}"
    for p in ps:
        if p.name in names or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            return f"extra parameter {p.name} has no default"
    return ""


@pytest.mark.parametrize("engine", ENGINES)
def test_adapter_matches_the_pinned_methods(engine):
    mod, cls = adapter(engine)
    facts = FACTS[engine]
    assert tuple(facts["methods"]) == mod.IMPLEMENTS
    assert facts["commit"] in mod.__doc__ and facts["commit"] in mod.UPSTREAM.values()
    for name, names in facts["methods"].items():
        fn = getattr(cls, name, None)
        assert callable(fn), f"{engine}: {name} missing"
        why = conforms(fn, names)
        assert not why, f"{engine}.{name}: {why}"
        assert name in mod.__doc__, f"{engine}: the module header does not list {name}"


def test_conformance_can_fail():
    def wrong(self, req_context, key):
        pass

    def extra(self, key, req_context, must):
        pass

    assert conforms(wrong, ["self", "key", "req_context"])
    assert conforms(extra, ["self", "key", "req_context"])


@pytest.mark.parametrize("engine", ENGINES)
def test_real_base_class(engine):
    facts = FACTS[engine]
    try:
        base_mod = importlib.import_module(facts["module"])
    except Exception as e:  # not installed, or not importable here
        pytest.skip(f"{facts['module']} is not importable: {e}")
    base = getattr(base_mod, facts["class"])
    _mod, cls = adapter(engine)
    assert issubclass(cls, base)
    for name, names in facts["methods"].items():
        if name in facts.get("not_on_base", {}):
            continue
        assert [p.name for p in params(getattr(base, name))][: len(names)] == names, name
