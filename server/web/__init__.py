"""The live operator's page and /metrics on the server's HTTP port (server/web/app.py)."""
