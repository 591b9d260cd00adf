# syntax=docker/dockerfile:1
#
# The ansible-operator base image, used exactly like Operator SDK's quay.io/operator-framework/ansible-operator
# (mirrors images/ansible-operator/Dockerfile of operator-framework/ansible-operator-plugins). An Operator SDK
# project's own Dockerfile works unchanged with only its FROM line pointing here:
#
#   FROM ghcr.io/example/ansible-operator:0.1.0
#   COPY requirements.yml ${HOME}/requirements.yml
#   RUN ansible-galaxy collection install -r ${HOME}/requirements.yml \
#    && chmod -R ug+rwx ${HOME}/.ansible
#   COPY watches.yaml ${HOME}/watches.yaml
#   COPY roles/ ${HOME}/roles/
#   COPY playbooks/ ${HOME}/playbooks/
#
# Build it:   docker build -t ghcr.io/example/ansible-operator:0.1.0 .
# The SDK image's Ansible (ansible-core 2.18):   add --build-arg ANSIBLE_CORE_VERSION=2.18.19
#
# Stage 1 installs the runner, its pinned dependencies (pyproject.toml), the chosen ansible-core, dumb-init and
# the kubernetes.core collection into a virtualenv; stage 2 copies only that virtualenv. Collections: only
# kubernetes.core (taken from the pinned `ansible` wheel on PyPI, ~5 MB, not the ~470 MB bundle) and the ones
# the runner ships in its package (ansible_operator.util, operator_sdk.util); anything else comes from the
# project's requirements.yml, as with the SDK image. tests/image/ builds this file's filesystem without an
# engine and starts its ENTRYPOINT against the sandbox API server.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# ---- build ---------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build

# ansible-core for the runs; the runner supports 2.16 through 2.21 (pyproject.toml; 2.20+ need this image's
# Python 3.12). Default: what the development venv pins and CI runs the whole suite on. SDK image: 2.18.
ARG ANSIBLE_CORE_VERSION=2.19.14
# The `ansible` release on PyPI that kubernetes.core is extracted from (12.3.0 carries kubernetes.core 6.2.0).
ARG KUBERNETES_CORE_FROM_ANSIBLE=12.3.0
ARG DUMB_INIT_VERSION=1.2.5.post1

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src
COPY pyproject.toml README.md ./
COPY ansible_operator/ ansible_operator/
COPY scripts/install_kubernetes_core.py scripts/
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir . "ansible-core==${ANSIBLE_CORE_VERSION}" \
        "dumb-init==${DUMB_INIT_VERSION}" \
    && /opt/venv/bin/python scripts/install_kubernetes_core.py --bundle "${KUBERNETES_CORE_FROM_ANSIBLE}" \
    && /opt/venv/bin/ansible-operator --version \
    && /opt/venv/bin/python -c "import ansible_collections.kubernetes.core.plugins.module_utils.k8s.core"

# ---- runtime -------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

# Operator SDK's layout: HOME=/opt/ansible (watches.yaml, roles/, playbooks/, requirements.yml), user 1001 in
# group 0 with group-writable home (OpenShift's arbitrary uids), /etc/ansible/ansible.cfg with the roles path.
# DUMB_INIT_SETSID=0: the init forwards signals to the operator only, never straight to in-flight
# ansible-playbook processes, so SIGTERM gets --graceful-shutdown-timeout (runs finish, then stop).
# USER: the login name getpass.getuser() (kopf's peering identity, Ansible's local connection) reads before
# /etc/passwd, so an arbitrary uid without a passwd entry (OpenShift's restricted SCC) runs too.
ENV HOME=/opt/ansible \
    USER_NAME=ansible \
    USER=ansible \
    USER_UID=1001 \
    PATH=/opt/venv/bin:${PATH} \
    PYTHONPATH=/opt/venv/site-packages \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DUMB_INIT_SETSID=0

RUN mkdir -p /etc/ansible "${HOME}/.ansible/tmp" "${HOME}/roles" "${HOME}/playbooks" \
    && echo "localhost ansible_connection=local" > /etc/ansible/hosts \
    && printf '[defaults]\nroles_path = /opt/ansible/roles\n' > /etc/ansible/ansible.cfg \
    && echo "${USER_NAME}:x:${USER_UID}:0:${USER_NAME} user:${HOME}:/sbin/nologin" >> /etc/passwd \
    && chown -R "${USER_UID}:0" "${HOME}" \
    && chmod -R ug+rwx "${HOME}"

COPY --from=build /opt/venv /opt/venv
# The SDK image's paths, so ENTRYPOINTs and scripts written for it keep working: /tini is the init
# (dumb-init, reaps orphaned processes as PID 1), /usr/local/bin/ansible-operator the runner.
# The SDK image installs its runtime into the system Python, and SDK projects pin ansible_python_interpreter
# to it (current scaffolds /usr/local/bin/python3, older ones /usr/bin/python3): PYTHONPATH (above) gives
# the system Python the venv's packages (kubernetes and all kubernetes.core needs; none shadows the standard
# library), and /usr/bin/python3 is the base image's Python where the base image has none (python:*-slim).
RUN ln -s /opt/venv/bin/dumb-init /tini \
    && ln -s /opt/venv/bin/ansible-operator /usr/local/bin/ansible-operator \
    && ln -s /opt/venv/lib/python3*/site-packages /opt/venv/site-packages \
    && { [ -e /usr/bin/python3 ] || ln -s /usr/local/bin/python3 /usr/bin/python3; }

WORKDIR ${HOME}
USER 1001

# 6789: /healthz and /readyz; 8443: /metrics (the SDK's default --metrics-bind-address).
EXPOSE 6789 8443

ENTRYPOINT ["/tini", "--", "/usr/local/bin/ansible-operator", "run", "--watches-file=./watches.yaml"]
