"""The warm executor: a pre-imported Ansible "zygote" process that forks one child per run.

Operator side (asyncio):
    ``executor``        ``WarmExecutor``, the ``--executor warm`` implementation: starts, feeds and
                        restarts the zygote
    ``protocol``        the JSON-lines wire format between the two (imports nothing)
Zygote side (``python -m ansible_operator.executors.warm.zygote``, never imported by the operator's loop):
    ``zygote``          the zygote program: preload Ansible, fork a child per run, relay its events
    ``child``           one run inside a forked child: re-point Ansible's import-time state, run the playbook
    ``tasks``           localhost tasks in the run child, without a worker fork
    ``fast_modules``    selected modules in a fork of the process running the task, not a new interpreter
    ``inline_modules``  those modules in the task's own process, without the fork
    ``payloads``        AnsiballZ payloads shared between runs
    ``templates``       compiled Jinja templates shared between runs
    ``plugin_docs``     plugin documentation read once per zygote
Both:
    ``ansible_compat``  the supported ansible-core minors and their internals; the only module that imports
                        ansible-core's private ones (tests/unit/test_layer_contracts.py)

Shared with the runner executor, one level up: ``base`` (the interface), ``datadir``/``varsfile`` (a run's
private data dir), ``lifetime`` (processes die with the operator). Nothing here imports ``runner`` and the
runner imports nothing here. Kept empty of imports so that the zygote importing a submodule pays for
nothing else.
"""
