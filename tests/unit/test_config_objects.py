"""Reading a Secret's or ConfigMap's key (inference_rollout.config_objects): decoded once, here,
for every reader; a value that does not decode is None, a missing one says why."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from inference_rollout.config_objects import Missing, configmap_text, secret_text
from inference_rollout.kube import KubeError


class Objects:
    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.paths: list[str] = []

    async def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        if path not in self.objects:
            raise KubeError(404, "GET", path, '{"message": "not found"}')
        return self.objects[path]


SECRET = "/api/v1/namespaces/team-a/secrets/prom"
CM = "/api/v1/namespaces/team-a/configmaps/cases"


def test_a_secrets_key_is_decoded_and_stripped() -> None:
    kube = Objects({SECRET: {"data": {"token": base64.b64encode(b"abc.def\n").decode(),
                                      "bad": "%%%", "binary": base64.b64encode(b"\xff").decode()}}})
    assert asyncio.run(secret_text(kube, "team-a", "prom", "token")) == "abc.def"
    assert asyncio.run(secret_text(kube, "team-a", "prom", "bad")) is None
    assert asyncio.run(secret_text(kube, "team-a", "prom", "binary")) is None
    absent = asyncio.run(secret_text(kube, "team-a", "prom", "other"))
    assert isinstance(absent, Missing) and str(absent) == "Secret prom has no key 'other'"
    gone = asyncio.run(secret_text(kube, "team-a", "nope", "token"))
    assert isinstance(gone, Missing) and gone.status == 404 and "Secret nope" in str(gone)
    assert kube.paths[0] == SECRET


def test_a_configmaps_key_or_why_not() -> None:
    kube = Objects({CM: {"data": {"cases.jsonl": '{"prompt": "p"}'}}})
    assert asyncio.run(configmap_text(kube, "team-a", "cases", "cases.jsonl")) == \
        '{"prompt": "p"}'
    absent = asyncio.run(configmap_text(kube, "team-a", "cases", "x"))
    assert str(absent) == "ConfigMap cases has no key 'x'"
