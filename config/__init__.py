from config.settings import ConfigError, Settings, get_settings, load_settings, use_settings

__all__ = ["ConfigError", "Settings", "get_settings", "load_settings", "use_settings"]
