import os

# pydantic looks for plugins in the metadata of every installed distribution when it builds its
# first model: about 40 ms of every process's start (each `svcctl` run of an ERP job, each API
# worker and consumer). The service uses no pydantic plugin; an operator who installs one sets
# this variable to a list of the plugins to leave out instead (pydantic's documented switch).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from config.settings import ConfigError, Settings, get_settings, load_settings, use_settings  # noqa: E402

__all__ = ["ConfigError", "Settings", "get_settings", "load_settings", "use_settings"]
