# syntax=docker/dockerfile:1
#
# The example operators of this repository (watches.yaml, roles/, playbooks/) on the base image built from
# ./Dockerfile -- exactly how an Operator SDK project's Dockerfile uses quay.io/operator-framework/ansible-operator.
# The example roles need only kubernetes.core, which the base image carries, so there is no
# `ansible-galaxy collection install -r requirements.yml` step here.
#
#   docker build -t ghcr.io/example/ansible-operator:0.1.0 .
#   docker build -f examples.Dockerfile -t ghcr.io/example/ansible-operator-examples:0.1.0 .

ARG BASE_IMAGE=ghcr.io/example/ansible-operator:0.1.0
FROM ${BASE_IMAGE}

# The example roles read no facts: skip gathering them (saves a round per run).
ENV ANSIBLE_GATHERING=explicit

COPY watches.yaml ${HOME}/watches.yaml
COPY roles/ ${HOME}/roles/
COPY playbooks/ ${HOME}/playbooks/
