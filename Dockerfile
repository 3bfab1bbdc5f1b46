# syntax=docker/dockerfile:1
# remote-leader: `remote-leader serve` by default; the same image runs `remote-leader sidecar`.
#
#   docker build -t remote-leader:0.1.0 .
#   docker run --rm -p 50051:50051 -p 9464:9464 -v rl-state:/var/lib/remote-leader \
#     --stop-timeout 30 remote-leader:0.1.0
#
# The build stage runs scripts/bootstrap.sh's two pip commands against the same pyproject.toml,
# in a venv: upgrade pip, then install the project, here non-editable and without the dev and
# pipeline extras (no test tools, no Spark). Only that venv reaches the runtime stage, which
# therefore has no pip cache, no sources and no compilers (docs/deployment.md).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY assignor/ assignor/
COPY server/ server/
COPY client/ client/
COPY pipeline/ pipeline/
COPY remote_leader/ remote_leader/
RUN /opt/venv/bin/python -m pip install --quiet --upgrade pip \
 && /opt/venv/bin/python -m pip install --quiet . \
 && /opt/venv/bin/remote-leader --help > /dev/null \
 && /opt/venv/bin/python -m remote_leader.healthcheck --help > /dev/null

FROM ${PYTHON_IMAGE} AS runtime
ARG UID=10001
LABEL org.opencontainers.image.title="remote-leader" \
      org.opencontainers.image.description="A remote group leader for stateful stream processing (KIP-441 assignment over gRPC)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid "${UID}" remote-leader \
 && useradd --system --uid "${UID}" --gid remote-leader --no-create-home \
      --home-dir /var/lib/remote-leader --shell /usr/sbin/nologin remote-leader \
 && install -d -o remote-leader -g remote-leader -m 0750 /var/lib/remote-leader
COPY --from=build /opt/venv /opt/venv
# docs/interfaces.md: listen on every interface in a container (the loopback default is for
# local runs), keep the state in the volume, serve /metrics on 9464.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REMOTE_LEADER_LISTEN=0.0.0.0:50051 \
    REMOTE_LEADER_STATE_DIR=/var/lib/remote-leader \
    REMOTE_LEADER_METRICS_PORT=9464
WORKDIR /var/lib/remote-leader
VOLUME ["/var/lib/remote-leader"]
EXPOSE 50051 9464
USER ${UID}:${UID}
# Healthy = state loaded and not draining (grpc.health.v1 for remote_leader.v1.GroupLeader),
# probed by the image's own Python module: no grpc_health_probe download.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-m", "remote_leader.healthcheck", "--service", "remote_leader.v1.GroupLeader", "--timeout", "4"]
ENTRYPOINT ["remote-leader"]
CMD ["serve"]
