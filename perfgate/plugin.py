"""pytest plugin (placeholder until the gate lands)."""
