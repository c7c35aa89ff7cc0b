"""Hostile InferenceRollout manifests for the fuzz tests: the repository's examples, mutated.

One manifest per seed (``mutated(seed)``), so a failure is reproduced from its seed alone, the
unit tier's hypothesis tests draw seeds, and the integration tier can send the same manifests to a
real API server.  Mutations, one to four per manifest:

* a leaf anywhere under ``spec`` (or the name) replaced by an extreme: inf, nan, negative, zero,
  huge numbers, empty / 300-character / unicode strings, wrong types, durations out of range;
* a key deleted; a list emptied;
* a long or unicode ``metadata.name``;
* the first metric duplicated (duplicate metric names);
* steps reversed, shuffled or repeated (non-monotonic weights).

``json_safe`` says whether a manifest can travel as JSON to an API server at all (inf and nan
cannot: kubectl refuses them before the server sees them).
"""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = sorted([*ROOT.glob("examples/*.yaml"), *ROOT.glob("examples/budget/*.yaml")])


def _examples() -> list[dict[str, Any]]:
    out = []
    for f in EXAMPLE_FILES:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "InferenceRollout":
                doc.setdefault("metadata", {}).setdefault("name", "fuzz")
                out.append(doc)
    return out


EXAMPLES = _examples()

EXTREMES: list[Any] = [
    math.inf, -math.inf, math.nan, -1, 0, 1, -0.5, 0.5, 2**31, 2**31 - 1, 2**53 + 1, 2**63,
    2**64, 10**30, 1e308, -1e308, 1e-308, "", " ", "x" * 300, "ünïcødé-名前", "🚀🚀", "-5s", "0s",
    "1h", "999999999h", "5", "1.5e3", "null", None, True, False, [], {}, [1, 2], {"a": 1},
]
NAMES = ["a" * 253, "a" * 64, "a" * 42, "名前", "ünï", "UPPER", "-lead", "trail-", "a.b",
         "a_b", "", "x"]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value under ``node`` (dict keys and list indices)."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


def _set_leaf(rng: random.Random, doc: dict[str, Any]) -> str:
    path = rng.choice(_paths(doc["spec"], ("spec",)))
    value = rng.choice(EXTREMES)
    _parent(doc, path)[path[-1]] = copy.deepcopy(value)
    return f"set {'.'.join(map(str, path))}"


def _delete(rng: random.Random, doc: dict[str, Any]) -> str:
    path = rng.choice(_paths(doc["spec"], ("spec",)))
    parent = _parent(doc, path)
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    return f"delete {'.'.join(map(str, path))}"


def _name(rng: random.Random, doc: dict[str, Any]) -> str:
    doc["metadata"]["name"] = rng.choice(NAMES)
    return "name"


def _duplicate_metric(rng: random.Random, doc: dict[str, Any]) -> str:
    metrics = ((doc["spec"].get("analysis") or {}).get("metrics"))
    if isinstance(metrics, list) and metrics:
        metrics.append(copy.deepcopy(metrics[0]))
        return "duplicate metric"
    return _set_leaf(rng, doc)


def _steps(rng: random.Random, doc: dict[str, Any]) -> str:
    strategy = doc["spec"].setdefault("strategy", {})
    if not isinstance(strategy, dict):
        return _set_leaf(rng, doc)
    steps = strategy.get("steps") or [{"weight": 5}, {"weight": 50}, {"weight": 100}]
    if not isinstance(steps, list):
        return _set_leaf(rng, doc)
    how = rng.choice(("reverse", "shuffle", "repeat"))
    steps = list(reversed(steps)) if how == "reverse" else (
        rng.sample(steps, len(steps)) if how == "shuffle" else [*steps, *steps])
    strategy["steps"] = copy.deepcopy(steps)
    return f"steps {how}"


MUTATIONS = [_set_leaf] * 6 + [_delete] * 2 + [_name, _duplicate_metric, _steps]


def mutated(seed: int) -> tuple[dict[str, Any], list[str]]:
    """A mutated example and what was done to it."""
    rng = random.Random(seed)
    doc = copy.deepcopy(rng.choice(EXAMPLES))
    done = []
    for _ in range(rng.randint(1, 4)):
        try:
            done.append(rng.choice(MUTATIONS)(rng, doc))
        except (IndexError, KeyError, TypeError, AttributeError):  # nothing left to mutate there
            done.append("no-op")
    return doc, done


def json_safe(node: Any) -> bool:
    if isinstance(node, float):
        return math.isfinite(node)
    if isinstance(node, dict):
        return all(json_safe(v) for v in node.values())
    if isinstance(node, list):
        return all(json_safe(v) for v in node)
    return True
