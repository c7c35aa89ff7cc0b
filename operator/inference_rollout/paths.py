"""The one builder of Kubernetes API paths: every segment is a name, checked and encoded.

Why this exists: object names come from a tenant's spec (``httpRouteRef.name``, Secret and
ConfigMap refs) and from its status (``stableRevision``), and a path is a string.  Pasted in
unchecked, ``../../team-b/httproutes/bank`` is a path into another namespace (HTTP clients resolve
dot segments before sending).  So nothing here accepts a segment that is not a Kubernetes name:
a namespace is a DNS-1123 label, an object name a DNS-1123 subdomain (which has no ``/``, no
``%`` and cannot be ``.`` or ``..``), and each segment is percent-encoded on top, so even a check
that someone loosens later cannot make a segment into two.  :class:`ApiPath` is the only type the
Kubernetes adapter takes (``kube.Kube``): a path built any other way does not type-check.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from .api import GROUP, PLURAL, VERSION

#: DNS-1123 label: a namespace, a Service; what Kubernetes' IsDNS1123Label accepts.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: DNS-1123 subdomain: most object names; what Kubernetes' IsDNS1123Subdomain accepts.
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
API_VERSION = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?")
SUBRESOURCES = frozenset({"status", "scale"})


class UnsafeName(ValueError):
    """A segment that is not a Kubernetes name: never turned into a path."""

    def __init__(self, what: str, value: str, rule: str) -> None:
        self.what, self.value = what, value
        super().__init__(f"{what} {value[:80]!r} is not {rule}")


def is_label(value: str) -> bool:
    return len(value) <= 63 and DNS1123_LABEL.fullmatch(value) is not None


def is_subdomain(value: str) -> bool:
    return len(value) <= 253 and DNS1123_SUBDOMAIN.fullmatch(value) is not None


def check_label(what: str, value: str) -> str:
    if not isinstance(value, str) or not is_label(value):
        raise UnsafeName(what, str(value), "a DNS-1123 label (lower-case letters, digits and '-', "
                         "at most 63, starting and ending with a letter or digit)")
    return value


def check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not is_subdomain(value):
        raise UnsafeName(what, str(value), "a Kubernetes object name (DNS-1123 subdomain: "
                         "lower-case letters, digits, '-' and '.', at most 253)")
    return value


def _segment(value: str) -> str:
    return quote(value, safe="")


class ApiPath(str):
    """A path made by :func:`ns_path`, :func:`cluster_path` or :meth:`sub`, nothing else."""

    __slots__ = ()

    def sub(self, subresource: str) -> ApiPath:
        """The object's ``status`` or ``scale`` subresource."""
        if subresource not in SUBRESOURCES:
            raise UnsafeName("subresource", subresource, f"one of {sorted(SUBRESOURCES)}")
        return ApiPath(f"{self}/{subresource}")


def _base(group: str, version: str) -> str:
    if not API_VERSION.fullmatch(version):
        raise UnsafeName("API version", version, "an API version such as v1 or v1beta1")
    if not group:
        return f"/api/{version}"
    check_name("API group", group)
    return f"/apis/{_segment(group)}/{version}"


def ns_path(group: str, version: str, namespace: str, plural: str,
            name: str | None = None) -> ApiPath:
    """``/api/v1/namespaces/ns/services/x`` or ``/apis/g/v/namespaces/ns/plural/x``; the
    collection without ``name`` (an empty name is refused: it would name the collection)."""
    check_label("namespace", namespace)
    check_label("resource", plural)
    path = f"{_base(group, version)}/namespaces/{_segment(namespace)}/{_segment(plural)}"
    if name is not None:
        path += "/" + _segment(check_name(f"{plural[:-1] or plural} name", name))
    return ApiPath(path)


def cluster_path(group: str, version: str, plural: str, name: str | None = None) -> ApiPath:
    """A cluster-scoped collection or object: ``/api/v1/namespaces``, ``/apis/g/v/plural``."""
    check_label("resource", plural)
    path = f"{_base(group, version)}/{_segment(plural)}"
    if name is not None:
        path += "/" + _segment(check_name(f"{plural[:-1] or plural} name", name))
    return ApiPath(path)


def rollout_path(namespace: str, name: str | None = None) -> ApiPath:
    """One InferenceRollout (the operator, the CLI and the watchdog all use it), or the
    namespace's collection of them."""
    return ns_path(GROUP, VERSION, namespace, PLURAL, name)
