"""An example torchlint plugin (see its pyproject.toml)."""
