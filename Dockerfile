# syntax=docker/dockerfile:1
#
# Missive, CPU image: the core, the llama.cpp driver with the embedded default
# model (SmolLM2-135M-Instruct), and the remote-backend drivers (openai, vllm,
# llamaserver, ollama). docs/deployment.md has how to build and run it, and
# the CUDA variant (Dockerfile.cuda). tests/test_deployment.py checks this file
# statically; the image is not built by the test suite.
#
#   docker build -t missive .
#   docker run --init -p 8642:8642 -e MISSIVE_API_KEY=sk-change-me missive

ARG PYTHON_IMAGE=python:3.12-slim

# --- build: compile llama-cpp-python (an sdist) and install everything in a venv
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake ninja-build \
    && rm -rf /var/lib/apt/lists/*
# llama.cpp's build flags. GGML_NATIVE=OFF: not -march=native of the build
# machine, but a portable x86-64 set (AVX2, FMA, F16C), so the image runs on
# other CPUs. -DGGML_NATIVE=ON: fastest on machines like the build machine only.
ARG CMAKE_ARGS="-DGGML_NATIVE=OFF"
RUN python -m venv /opt/missive
ENV PATH=/opt/missive/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY core ./core
COPY plugins/llamacpp ./plugins/llamacpp
COPY plugins/openai ./plugins/openai
COPY plugins/vllm ./plugins/vllm
COPY plugins/llamaserver ./plugins/llamaserver
COPY plugins/ollama ./plugins/ollama
# The README's install, not editable: plain pip needs each sibling distribution
# on the same command line as the extras naming it.
RUN CMAKE_ARGS="${CMAKE_ARGS}" pip install --no-cache-dir \
        ".[default,openai,vllm,llamaserver,ollama]" \
        "./plugins/llamacpp[default-model]" \
        ./plugins/openai \
        ./plugins/vllm \
        ./plugins/llamaserver \
        ./plugins/ollama

# --- runtime: the venv, no compilers, a user without privileges
FROM ${PYTHON_IMAGE}
# libgomp1: llama.cpp's OpenMP threads.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/missive --shell /usr/sbin/nologin missive
COPY --from=build /opt/missive /opt/missive
# MISSIVE_STATE_DIR: the generated thinking key and the llamacpp start-up trial
# records; mount a volume here so they survive the container.
ENV PATH=/opt/missive/bin:$PATH \
    MISSIVE_STATE_DIR=/var/lib/missive \
    PYTHONUNBUFFERED=1
USER missive
WORKDIR /var/lib/missive
VOLUME ["/var/lib/missive"]
EXPOSE 8642
# /livez answers once the models are loaded (Missive listens only then).
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/livez' % os.environ.get('MISSIVE__SERVER__PORT', '8642'), timeout=4)"]
# SIGTERM drains: running answers get server.shutdown_grace (30 s) to finish.
# Give `docker stop` more than that: docker run --stop-timeout 45.
STOPSIGNAL SIGTERM
CMD ["missive", "serve", "--host", "0.0.0.0"]
