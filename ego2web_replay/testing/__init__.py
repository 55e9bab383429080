"""Test builders shipped with the package: a local site, a fake OpenAI-compatible
server, flow helpers. Importable by users' own tests too."""
