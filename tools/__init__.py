"""Maintenance tooling: writes the files generated from the code. Product code never imports it."""
