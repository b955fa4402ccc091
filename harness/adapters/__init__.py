"""The suites as pytest and asv see them, generated from their definitions."""
