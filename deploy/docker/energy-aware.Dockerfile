# syntax=docker/dockerfile:1
# The EnergyAware sidecar (Python, grpcio); listens on $SWITCHYARD_PLUGIN_LISTEN.
#
# Build from the repository root:
#   DOCKER_BUILDKIT=1 docker build -f deploy/docker/energy-aware.Dockerfile -t switchyard/energy-aware:0.1.0 .
# (deploy/docker/energy-aware.Dockerfile.dockerignore keeps the context to the
# files copied below.)
#
# sidecar.py generates its gRPC stubs from ../../proto into ./_gen on start when they
# are missing or older than the .proto file. The root filesystem is read-only in the
# pod, so the stubs are generated here, at build time, from /proto (= /app/../../proto,
# where the script looks), and the last step checks as the runtime user that start-up
# does not need to write them again.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY plugins/python-energy/requirements.txt /app/requirements.txt
RUN pip install -r /app/requirements.txt
COPY proto/switchyard /proto/switchyard
COPY plugins/python-energy/sidecar.py /app/sidecar.py
# Importing the module runs load_stubs(): it writes /app/_gen/switchyard/plugin/v1/
# plugin_pb2.py and plugin_pb2_grpc.py. Then byte-compile everything once, since
# nothing can be written at run time.
RUN cd /app && python3 -c "import sidecar" \
 && test -f /app/_gen/switchyard/plugin/v1/plugin_pb2_grpc.py \
 && python3 -m compileall -q /app /opt/venv

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
            --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/venv /opt/venv
COPY --from=build /proto /proto
COPY --from=build /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    SWITCHYARD_PLUGIN_LISTEN=unix:///var/run/switchyard/energy.sock
USER 65532:65532
# Fails the build if the stubs would be regenerated at start (uid 65532 cannot write
# /app, as the read-only root filesystem will not let it in the pod).
RUN cd / && python3 -c "import sys; sys.path.insert(0, '/app'); import sidecar"
WORKDIR /app
ENTRYPOINT ["python3", "/app/sidecar.py"]
