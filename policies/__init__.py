"""Policy presets shipped with agentmem (YAML files beside this module)."""
