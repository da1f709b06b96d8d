"""Runnable entry points and their YAML configs."""
