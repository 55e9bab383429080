"""CLI command modules. Each module exports ``COMMANDS``, a list of click commands;
``ego2web_replay.cli`` registers every module found here."""
