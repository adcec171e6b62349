# mirror-v3 image: the pinned Python packages (pyspark brings Spark's jars), runs as non-root.
# Built by the same scripts/setup.sh that CI runs, so CI exercises the image's install steps.
#   docker build -t mirror-v3 .
#   docker run --rm -v "$PWD/examples:/cfg" mirror-v3 validate --config /cfg/minimal.yaml

FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
ENV MIRROR_V3_VENV=/opt/mirror-v3/venv \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# The package's metadata names its licence files (PEP 639): the build needs them beside pyproject.toml.
COPY pyproject.toml README.md LICENSE NOTICE CHANGELOG.md ./
COPY core ./core
COPY config ./config
COPY kafka_clients ./kafka_clients
COPY telemetry ./telemetry
COPY source ./source
COPY sinks ./sinks
COPY supervisor ./supervisor
COPY commands ./commands
COPY workers ./workers
COPY scripts ./scripts
COPY schemas ./schemas
COPY examples ./examples
RUN bash scripts/setup.sh --no-dev \
 && mkdir -p /opt/mirror-v3/share \
 && cp -r schemas examples /opt/mirror-v3/share/

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /nonexistent mirror
COPY --from=build /opt/mirror-v3 /opt/mirror-v3
ENV PATH=/opt/mirror-v3/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MIRROR_V3_JVM_CACHE=/opt/mirror-v3/jvm
# The Spark JVM's class archive, made with this stage's JDK (read-only for the runtime user; see prepare-jvm).
RUN mirror-v3 prepare-jvm
USER 10001:10001
WORKDIR /tmp
EXPOSE 7780
# The package's own command (the same CLI as `python -m supervisor`): `docker run mirror-v3 run --config ...`.
ENTRYPOINT ["mirror-v3"]
CMD ["--help"]
