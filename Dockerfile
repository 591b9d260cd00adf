# syntax=docker/dockerfile:1
#
# The example operators as one image: the ansible-operator runner plus watches.yaml, roles/ and
# playbooks/ of this repository.
#
#   docker build -t ghcr.io/example/ansible-operator-examples:0.1.0 .
#
# Stage 1 installs the package and its pinned dependencies (pyproject.toml) into a virtualenv;
# stage 2 copies only that virtualenv, so no compiler, pip cache or source tree ends up in the image.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
# Only the package is built here; roles are copied in the runtime stage, so editing a role reuses
# this (slow) stage from the build cache.
COPY pyproject.toml README.md ./
COPY ansible_operator/ ansible_operator/
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/ansible-operator --version \
    && /opt/venv/bin/python -c "import ansible_collections.kubernetes.core"

# ---- runtime -------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

# Operator SDK's conventions: the operator's home is /opt/ansible, roles live in /opt/ansible/roles,
# and it runs as uid 1001 with group 0, so it also works with OpenShift's arbitrary user ids.
# ANSIBLE_GATHERING=explicit: the example roles use no facts, so runs skip fact gathering (~1 s each);
# remove it if your roles read ansible_facts.
ARG USER_UID=1001
ENV HOME=/opt/ansible \
    PATH=/opt/venv/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WATCHES_FILE=/opt/ansible/watches.yaml \
    ANSIBLE_ROLES_PATH=/opt/ansible/roles \
    ANSIBLE_LOCAL_TEMP=/tmp/ansible/local \
    ANSIBLE_REMOTE_TEMP=/tmp/ansible/remote \
    ANSIBLE_FORCE_COLOR=0 \
    ANSIBLE_GATHERING=explicit

RUN useradd --uid "${USER_UID}" --gid 0 --home-dir /opt/ansible --no-create-home \
        --shell /usr/sbin/nologin ansible-operator \
    && mkdir -p /opt/ansible/.ansible /etc/ansible \
    && printf '[defaults]\nroles_path = /opt/ansible/roles\nlocal_tmp = /tmp/ansible/local\nretry_files_enabled = False\n' \
        > /etc/ansible/ansible.cfg \
    && chown -R "${USER_UID}:0" /opt/ansible \
    && chmod -R g=u /opt/ansible

COPY --from=build /opt/venv /opt/venv
COPY --chown=${USER_UID}:0 watches.yaml /opt/ansible/watches.yaml
COPY --chown=${USER_UID}:0 roles/ /opt/ansible/roles/
COPY --chown=${USER_UID}:0 playbooks/ /opt/ansible/playbooks/

USER ${USER_UID}
WORKDIR /opt/ansible

# 6789: /healthz and /readyz (Kubernetes probes);  8080: /metrics (Prometheus).
EXPOSE 6789 8080
# For plain `docker run`; in Kubernetes the Deployment's probes (config/manager) do this job.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:6789/healthz', timeout=4)"]

ENTRYPOINT ["ansible-operator", "run", "--watches-file", "/opt/ansible/watches.yaml"]
