"""Plugin documentation read once per zygote, not once per run (part of the warm fast path).

Ansible reads a plugin's ``DOCUMENTATION`` (YAML, with its doc fragments) when it first loads the plugin
in a process, to register the plugin's configuration options with ``C.config``. Next time
``has_configuration_definition`` skips the parse, but only for a plugin that *has* options: a plugin
without any (inventory ``host_list``/``auto``/``ini``/``toml``, strategy ``linear``, callback ``oneline``)
is parsed again on every load. The zygote loads those plugins at start, and its children still parsed
them once per run: seven YAML documents in every warm run, an empty play included (~13 ms of a ~100 ms
empty-play run on 2 vCPUs; cProfile of the run child, the largest single item before any task).

:func:`install` wraps ``PluginLoader._load_config_defs`` so that a document found to define no options
is remembered by (plugin class, name, file) and not parsed again, in the zygote or in any child forked
after it. Nothing else changes: a plugin with options is left to Ansible's own check, and another file
under the same name (a playbook's own ``strategy_plugins/linear.py``) is read as usual. A run with the
fast path off calls :func:`disable` and reads every document as Ansible does.
"""

from __future__ import annotations

from typing import Any

_WITHOUT_OPTIONS: set[tuple[str, str, str]] = set()
_enabled = True


def install() -> None:
    """Wrap ``PluginLoader._load_config_defs`` (once; the zygote calls this before loading plugins)."""
    from ansible import constants as C
    from ansible.plugins import loader

    original = loader.PluginLoader._load_config_defs
    if getattr(original, "_remembers_plugins_without_options", False):
        return

    def _load_config_defs(self: Any, name: str, module: Any, path: str) -> None:
        key = (self.class_name, name, path)
        if _enabled and key in _WITHOUT_OPTIONS:
            return
        original(self, name, module, path)
        if not self.class_name:
            return
        type_name = loader.get_plugin_class(self.class_name)
        if type_name in C.CONFIGURABLE_PLUGINS and not C.config.has_configuration_definition(type_name, name):
            _WITHOUT_OPTIONS.add(key)

    _load_config_defs._remembers_plugins_without_options = True  # type: ignore[attr-defined]
    loader.PluginLoader._load_config_defs = _load_config_defs


def disable() -> None:
    """Every document is read again, as a fresh Ansible process reads it (a run with the fast path off)."""
    global _enabled
    _enabled = False

