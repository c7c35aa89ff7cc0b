# The operator image: `inference-rollout operator` on python:3.11-slim, as a non-root user.
#   docker build -t inference-rollout:0.1.0 .
# Not built in this repository's CI (no Docker engine there): see docs/install.md.

# --- build: install the package and its dependencies into a virtualenv -----------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel needs (.dockerignore keeps the rest out of the context).
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY crds ./crds
# Bytecode is compiled here, at build time: the running container's root filesystem is read-only.
RUN python -m venv /opt/venv && /opt/venv/bin/pip install .

# --- runtime: the virtualenv on the same base, nothing else -----------------------------------
FROM python:3.11-slim
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" uid/gid; the chart's securityContext runs as the same ids.
USER 65532:65532
WORKDIR /tmp
# 8080: kopf's liveness endpoint (/healthz); 8081: the operator's metrics (/metrics).
EXPOSE 8080 8081
ENTRYPOINT ["inference-rollout", "operator"]
# Default scope; the chart always passes its own arguments.
CMD ["--all-namespaces", "--log-format", "json"]
