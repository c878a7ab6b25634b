"""torchlint's rules: one module per rule, found by discovery (see torchlint.registry)."""
