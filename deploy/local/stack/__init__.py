"""The local stack on one machine, by concern (cli.py: its commands)."""
